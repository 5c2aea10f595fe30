"""The Trainer under torchrun: the device, the process group, and what the ranks agree on.

Launched with ``WORLD_SIZE`` > 1 the Trainer starts the process group (NCCL on CUDA, gloo on CPU) unless
the caller did; only rank 0 logs and saves; the clock that ends a timed run is the ranks' largest, so all
of them stop at the same step; and :meth:`DistributedRun.close` lets go of the DDP wrapper (and of the
group, when the Trainer started it).
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch

import bertkit.training.checkpoint_folders as ckpt_io
from bertkit.training.training_args import TrainingArguments


def training_device(config: TrainingArguments) -> torch.device:
    """``config.device``, else this rank's GPU where there is one, else the CPU."""
    if config.device:
        return torch.device(config.device)
    if torch.cuda.is_available():
        world = int(os.environ.get("WORLD_SIZE", "1"))
        index = int(os.environ.get("LOCAL_RANK", "0")) if world > 1 else 0
        gpus = torch.cuda.device_count()
        if index >= gpus:
            # One GPU per process: a rank past the last GPU would fail inside CUDA with an invalid ordinal.
            raise ValueError(
                f"torchrun rank LOCAL_RANK={index} has no GPU of its own: this machine has {gpus}. Start at "
                f"most {gpus} process(es) per node (--nproc_per_node), or train on the CPU with --device cpu"
            )
        return torch.device("cuda", index)
    return torch.device("cpu")


def start_process_group(device: torch.device) -> bool:
    """Under torchrun (WORLD_SIZE > 1), start the process group for ``device`` (NCCL on CUDA, gloo on
    CPU) unless one is up; True when this call started it."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return True


def end_process_group() -> None:
    """Destroy the process group once nothing holds it any more (see :meth:`Trainer.close`)."""
    import torch.distributed as dist

    gc.collect()
    dist.destroy_process_group()


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


class DistributedRun:
    """The Trainer's part that knows about ranks (a mixin of :class:`~bertkit.training.trainer.Trainer`)."""

    def _setup_distributed(self, config: TrainingArguments) -> None:
        """The device and, under torchrun (WORLD_SIZE / RANK / LOCAL_RANK), the process group."""
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = training_device(config)
        self.distributed = self.world_size > 1
        self._owns_group = start_process_group(self.device)
        self.is_main = self.rank == 0

    def is_world_process_zero(self) -> bool:
        """Whether this is the main process of the whole run (the one that logs and saves)."""
        return self.is_main

    def is_local_process_zero(self) -> bool:
        """Whether this is the main process on its machine (``LOCAL_RANK`` 0)."""
        return self.local_rank == 0

    def _barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def _gather_rng(self) -> list[dict[str, Any]]:
        """Every rank's RNG state, on rank 0 (the other ranks get an empty list)."""
        state = ckpt_io.rng_state()
        if not self.distributed:
            return [state]
        import torch.distributed as dist

        states: list[Any] = [None] * self.world_size
        dist.all_gather_object(states, state)
        return states if self.is_main else []

    def _out_of_time(self) -> bool:
        """max_minutes reached. Reads the clock for the step into ``_clock``: under DDP the
        largest of the ranks' clocks, so that all ranks stop at the same step (else one would hang)
        and a time-based learning rate is the same on every rank."""
        now = self._elapsed()
        if self.distributed:
            import torch.distributed as dist

            t = torch.tensor([now], dtype=torch.float64, device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            now = float(t.item())
        self._clock = now
        return now > 60.0 * self.config.max_minutes

    def close(self) -> None:
        """Let go of the DistributedDataParallel wrapper, and end the process group if this Trainer
        started it; ``train()`` calls it on its way out. The trained weights stay in ``raw_model``.

        The wrapper's reducer holds the process group and the work its gloo threads still own. It
        sits in reference cycles, so left alone it is freed whenever the garbage collector runs,
        possibly during interpreter shutdown, where freeing that work aborts the process."""
        released = self.model is not self.raw_model
        self.model = self.raw_model
        if self._owns_group:
            self._owns_group = False
            end_process_group()  # collects the released wrapper first
        elif released:
            gc.collect()
