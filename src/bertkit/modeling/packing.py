"""Padding packing: the attention mask of one batch, built once, and the length groups it attends in.

On a padded batch, :class:`AttentionMask` can *pack* the batch: every per-token op runs on the real
tokens only, as ``(T, C)`` rows, and attention runs per group of sequences of similar length
(:func:`length_groups`), each padded to its own longest. Every encoder family (BERT, DistilBERT)
builds one with :meth:`AttentionMask.build` and passes it to each layer; :func:`bertkit.modeling.layers.
multi_head_attention` reads it.
"""

from __future__ import annotations

import torch

from bertkit._cpu import attention_row_multiple

__all__ = ["ROW_MULTIPLE", "AttentionMask", "inference_rows", "length_groups", "padded_rows"]


class _LengthGroup:
    """Sequences of similar length that attend together, padded to their own longest: gather ``src``
    rows of the packed tokens into ``(batch, seq_len)`` and attend under ``mask`` (None: no padding slot).
    :attr:`AttentionMask.gather` takes the real rows back out."""

    __slots__ = ("src", "mask", "batch", "seq_len")

    def __init__(self, src: torch.Tensor, mask: torch.Tensor | None, batch: int, seq_len: int) -> None:
        self.src, self.mask, self.batch, self.seq_len = src, mask, batch, seq_len


# Per attention call, in units of (sequence x key x query) work of a 384-wide model: what a group
# costs besides its own B * N^2 (the kernel launch and the gathers). Measured on AVX-512 CPUs, where
# a call's fixed cost equals roughly 1,500 such units; wider models do more work per unit.
_GROUP_OVERHEAD = 1500 * 384

# In inference (eval mode, no gradient) a group's padded length is rounded up to a multiple of this:
# the small batched products of attention run markedly faster on row counts that fill whole register
# tiles (8 rows of AVX-512's, 16 of AMX's, read from this CPU's flags once, at import), and the extra
# slots are masked keys and dropped queries, so the result is unchanged. Training keeps the exact
# lengths: its reduced-precision kernels sum in an order that depends on the shape, dropout draws its
# masks by shape (a gradient-cached loss replays them in a second forward with a gradient), and a run
# should not change its trajectory with a speed trick.
ROW_MULTIPLE = attention_row_multiple()


def inference_rows(module: torch.nn.Module) -> int:
    """The row multiple of ``module``'s length groups now: :data:`ROW_MULTIPLE` in inference, else 1."""
    return ROW_MULTIPLE if not (module.training or torch.is_grad_enabled()) else 1


# On a GPU, inference pads instead: the packing plan reads the mask on the host (syncs and copies)
# and each length group adds kernel launches, host time that outweighs the padding the GPU computes.
# Measured on an H200, MiniLM over 4,096 polarity sentences in length-sorted batches of 256, medians
# of 7 interleaved passes: bf16 201 ms a pass padded against 279 ms packed, fp32 245 against 280.
def packs(module: torch.nn.Module, x: torch.Tensor, wanted: bool) -> bool:
    """Whether ``module``'s forward on ``x`` packs: ``wanted`` (its ``pack_padding``, and no per-layer
    outputs asked for), except inference on a device other than the CPU."""
    return wanted and (x.device.type == "cpu" or module.training or torch.is_grad_enabled())


def padded_rows(tokens: int) -> int:
    """The row count inference rounds a packed batch of ``tokens`` real tokens up to: a multiple of 16
    below 512 tokens, then of 1/16 of the power of two below (32 from 512, 64 from 1,024, ...), so at
    most about 6% of the rows are filler.

    oneDNN builds (JIT-compiles) a kernel for every new row count of a projection: about 3 ms each on
    an AMX CPU, where the product of a 1,000-row batch of MiniLM's takes 1-2 ms. Every batch of new
    texts brings a new count, so a pipeline over texts it had not seen took 1.6-1.75x the time of a
    second pass over the same texts. Rounded, a few hundred counts cover every batch up to 16,384
    tokens, and their kernels stay in oneDNN's cache.
    """
    step = max(16, 1 << max(0, tokens.bit_length() - 5))
    return -(-tokens // step) * step


def length_groups(lengths: list[int], hidden_size: int = 384) -> list[list[int]]:
    """Split sequences into groups by length, minimising ``sum(B_g * N_g^2) + overhead * groups``.

    Attention on a padded batch costs ``B * N_max^2``; on batches of mixed lengths most of it is
    padding. Sorted by length, the best contiguous split is a small dynamic programme over the
    distinct lengths. Returns lists of sequence indices (each in increasing order).
    """
    distinct = sorted(set(lengths) - {0})  # ascending; empty sequences have no tokens to attend
    count = [0] * len(distinct)
    where = {n: i for i, n in enumerate(distinct)}
    for n in lengths:
        if n:
            count[where[n]] += 1
    overhead = _GROUP_OVERHEAD / hidden_size
    # best[i]: cost of the i shortest distinct lengths; a group (j, i] is padded to distinct[i - 1]
    best, cut, members = [0.0], [0], [0]
    for c in count:
        members.append(members[-1] + c)
    for i in range(1, len(distinct) + 1):
        top = distinct[i - 1] ** 2
        j = min(range(i), key=lambda j: best[j] + (members[i] - members[j]) * top)
        best.append(best[j] + (members[i] - members[j]) * top + overhead)
        cut.append(j)
    bounds, i = [], len(distinct)
    while i > 0:
        bounds.append((distinct[cut[i]], distinct[i - 1]))
        i = cut[i]
    return [[b for b, n in enumerate(lengths) if lo <= n <= hi] for lo, hi in bounds]


class AttentionMask:
    """The attention mask of one batch, built once and passed to every layer.

    ``mask``: bool ``(B, 1, 1|N, N)`` for SDPA, True = attend; None when nothing is masked (SDPA then
    takes its fastest kernel). When ``index`` is set the batch is *packed*: every per-token op
    (projections, feed-forward, LayerNorm) runs on the T real tokens only, as ``(T, C)`` rows, and
    attention runs per group of sequences of similar length (:func:`length_groups`), each padded to
    its own longest, so a batch of mixed lengths pays for little padding anywhere. Padding positions
    of the outputs are zeros. In inference the packed rows are ``rows`` (:func:`padded_rows`): the
    T real tokens, then filler rows that every per-token op computes and no real row ever reads.
    """

    __slots__ = ("mask", "index", "batch", "seq_len", "groups", "gather", "pack_index")

    def __init__(
        self,
        mask: torch.Tensor | None,
        index: torch.Tensor | None = None,
        batch: int = 0,
        seq_len: int = 0,
        groups: list[_LengthGroup] | None = None,
        gather: torch.Tensor | None = None,
    ) -> None:
        self.mask, self.index, self.batch, self.seq_len = mask, index, batch, seq_len
        self.groups = groups or []
        # Packed row t of the attention output is row gather[t] of the groups' padded outputs laid end to
        # end (filler rows read row 0); None when that is row t itself, so nothing is gathered.
        self.gather = gather
        self.pack_index = index  # the row of (B * N) each packed row is gathered from

    @classmethod
    def build(
        cls,
        attention_mask: torch.Tensor | None,
        pack: bool = False,
        sync: bool = True,
        hidden_size: int = 384,
        row_multiple: int = 1,
    ) -> "AttentionMask":
        """From a ``(B, N)`` 0/1 or ``(B, N, N)`` mask.

        ``pack``: drop padding tokens (2-D masks only). ``sync=False`` skips the two steps that read
        the mask on the host (the all-ones shortcut and packing), for ``torch.compile``.
        ``row_multiple``: each group's padded length is rounded up to a multiple of it (see
        :func:`inference_rows`); above 1 (inference), the packed rows are also rounded up to
        :func:`padded_rows`.
        """
        if attention_mask is None:
            return cls(None)
        m = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0
        if sync and bool(m.all()):
            return cls(None)
        sdpa = m[:, None, None, :] if m.dim() == 2 else m[:, None, :, :]
        if not (pack and sync and m.dim() == 2):
            return cls(sdpa)
        batch, seq_len = m.shape
        index = m.reshape(-1).nonzero().squeeze(1)  # (T,) real tokens, sequence by sequence
        lengths = m.sum(1).tolist()
        starts = [0]
        for n in lengths[:-1]:
            starts.append(starts[-1] + n)
        groups, dst, slots = [], [], []
        offset = 0  # where this group's padded output starts among all the groups' outputs
        for members in length_groups(lengths, hidden_size):
            longest = -(-max(lengths[b] for b in members) // row_multiple) * row_multiple
            k = torch.arange(longest)
            n = torch.tensor([lengths[b] for b in members])
            valid = k[None, :] < n[:, None]  # (B_g, N_g)
            first = torch.tensor([starts[b] for b in members])
            # padding slots repeat the sequence's first token: masked out as keys, dropped as queries
            src = torch.where(valid, first[:, None] + k[None, :], first[:, None]).reshape(-1)
            full = bool(valid.all())
            groups.append(
                _LengthGroup(
                    src.to(m.device), None if full else valid[:, None, None, :].to(m.device), len(members), longest
                )
            )
            real = valid.reshape(-1).nonzero().squeeze(1)  # the real slots
            dst.append(src[real])  # the packed row of each
            slots.append(offset + real)
            offset += len(src)
        rows = padded_rows(len(index)) if row_multiple > 1 else len(index)
        gather = torch.zeros(rows, dtype=torch.long)  # filler rows (past the T real tokens) read row 0
        if dst:  # no groups when every sequence is empty
            gather[torch.cat(dst)] = torch.cat(slots)
        as_is = offset == rows and bool((gather == torch.arange(rows)).all())
        built = cls(sdpa, index, batch, seq_len, groups, None if as_is else gather.to(m.device))
        if rows > len(index):  # filler rows repeat the first token's row
            built.pack_index = torch.cat([index, index[:1].expand(rows - len(index))])
        return built

    @classmethod
    def wrap(cls, mask: "AttentionMask | torch.Tensor | None") -> "AttentionMask":
        """An :class:`AttentionMask` as is; a bool ``(B, 1, 1|N, N)`` SDPA mask (or None) wrapped."""
        return mask if isinstance(mask, AttentionMask) else cls(mask)

    @property
    def packed(self) -> bool:
        return self.index is not None

    @property
    def rows(self) -> int:
        """Packed rows: the real tokens, then any filler (0 when not packed)."""
        return 0 if self.pack_index is None else len(self.pack_index)

    def pack(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (rows, C): the T real tokens, then filler
        return x.reshape(self.batch * self.seq_len, -1).index_select(0, self.pack_index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:  # (rows, C) -> (B, N, C), zeros at padding
        # In place on a fresh buffer (autograd-safe) saves the clone that out-of-place index_copy makes.
        x = x[: len(self.index)]  # the real tokens; filler rows are dropped
        out = x.new_zeros(self.batch * self.seq_len, x.shape[-1]).index_copy_(0, self.index, x)
        return out.view(self.batch, self.seq_len, -1)
