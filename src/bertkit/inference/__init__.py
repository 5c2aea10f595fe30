"""Fast inference: CPU feature detection, precision (fp32/bf16/int8), and the one batched forward path.

::

    from bertkit.inference import prepare_for_inference, run_batched, cpu_flags
    model = prepare_for_inference(BertModel.from_pretrained(folder), dtype="auto")  # bf16 on AMX / AVX-512 BF16
"""

from bertkit._cpu import cpu_flags, describe_cpu, has_fast_bf16

from .batching import (
    MODEL_INPUTS,
    first_subtokens,
    inference_workers,
    length_batches,
    merge_windows,
    run_batched,
    softmax,
    threads_here,
    window_features,
    word_windows,
    worker_pool,
)
from .precision import (
    DTYPES,
    inference_dtype,
    prepare_for_inference,
    resolve_dtype,
    try_compile,
)

__all__ = [
    "DTYPES",
    "MODEL_INPUTS",
    "cpu_flags",
    "describe_cpu",
    "first_subtokens",
    "has_fast_bf16",
    "inference_dtype",
    "inference_workers",
    "length_batches",
    "merge_windows",
    "prepare_for_inference",
    "resolve_dtype",
    "run_batched",
    "softmax",
    "threads_here",
    "try_compile",
    "window_features",
    "word_windows",
    "worker_pool",
]
