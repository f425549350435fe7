"""Keys and values kept between decoding steps (incremental decoding, section 6.1's beam search).

The decoder's self-attention appends each step's keys and values; encoder-decoder attention projects
the encoder output (`memory`) once and reuses it. A position-aware self-attention (rotary, relative)
reads `length` before appending: the new queries sit at positions length .. length + T - 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values kept between decoding steps: (B, H, S, d_k) and (B, H, S, d_v).

    Self-attention appends each step's positions; encoder-decoder attention fills it once. The
    buffers grow by doubling, so a step writes in place instead of concatenating the whole past; `reorder`
    copies the filled positions only, into the buffers of the step before (kept as spares), so a beam search
    allocates no new cache per step (issue 37).
    """

    k_buf: Tensor | None = None
    v_buf: Tensor | None = None
    length: int = -1  # -1: all of k_buf is filled
    k_spare: Tensor | None = field(default=None, repr=False)  # where the next `reorder` writes, when it fits
    v_spare: Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.length < 0:
            self.length = 0 if self.k_buf is None else self.k_buf.size(2)

    @property
    def k(self) -> Tensor | None:
        return None if self.k_buf is None else self.k_buf[:, :, : self.length]  # (B, H, S, d_k)

    @property
    def v(self) -> Tensor | None:
        return None if self.v_buf is None else self.v_buf[:, :, : self.length]  # (B, H, S, d_v)

    def set(self, k: Tensor, v: Tensor) -> None:
        """Store k, v as the whole cache (encoder-decoder attention)."""
        self.k_buf, self.v_buf, self.length = k, v, k.size(2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's k, v (B, H, T, d) and return all positions so far."""
        if self.k_buf is None:
            self.set(k, v)
            return k, v
        need = self.length + k.size(2)
        if need > self.k_buf.size(2):  # grow: double the capacity
            cap = max(need, 2 * self.k_buf.size(2))
            self.k_buf = grow(self.k_buf, cap, self.length)
            self.v_buf = grow(self.v_buf, cap, self.length)
        self.k_buf[:, :, self.length:need] = k
        self.v_buf[:, :, self.length:need] = v
        self.length = need
        return self.k, self.v

    def append_kv(self, kv: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """`append` of kv (B, 2, H, T, d) (keys, values): the inference step's call (model/step_kv.py); `t`, the
        position, is this cache's length."""
        k, v = kv.unbind(1)
        return self.append(k, v)

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses). The tensors `k`, `v` and `append`
        returned before are not valid after the next `reorder` (their memory is reused)."""
        if self.k_buf is not None:
            self.k_buf, self.k_spare = select_rows(self.k_buf, self.k_spare, index, self.length), self.k_buf
            self.v_buf, self.v_spare = select_rows(self.v_buf, self.v_spare, index, self.length), self.v_buf


def spare_fits(buf: Tensor, spare: Tensor | None, n: int, dim: int) -> bool:
    """Whether `spare` can take `n` rows (along `dim`) of `buf`: its dtype, and every other size the same."""
    return (spare is not None and spare.size(dim) >= n and spare.dtype == buf.dtype
            and spare.shape[:dim] == buf.shape[:dim] and spare.shape[dim + 1:] == buf.shape[dim + 1:])


def select_rows(buf: Tensor, spare: Tensor | None, index: Tensor, length: int, dim: int = 0) -> Tensor:
    """buf's rows `index` along `dim` with the capacity of `buf`, its first `length` positions (dim + 2) copied,
    written into `spare` when it has room (a buffer of the same capacity), else into a new one. dim 0: a
    (B, H, capacity, d) `KVCache` buffer; dim 1: model/step_kv.py's (2 L, N, H, capacity, d)."""
    n, pos = index.numel(), dim + 2
    if buf.requires_grad and torch.is_grad_enabled():  # the module path under autograd: no out= copies
        return buf.index_select(dim, index)
    if not spare_fits(buf, spare, n, dim):
        spare = buf.new_empty((*buf.shape[:dim], n, *buf.shape[dim + 1:]))
    out = spare if spare.size(dim) == n else spare.narrow(dim, 0, n)  # (a view only where needed: once per step)
    if length == buf.size(pos):
        return torch.index_select(buf, dim, index, out=out)
    torch.index_select(buf.narrow(pos, 0, length), dim, index, out=out.narrow(pos, 0, length))
    return out


def grow(buf: Tensor, capacity: int, length: int, pos: int = 2) -> Tensor:
    """`buf` with `capacity` positions along dim `pos` (2: a (B, H, capacity, d) buffer), its first `length`
    copied."""
    out = buf.new_empty((*buf.shape[:pos], capacity, *buf.shape[pos + 1:]))
    out.narrow(pos, 0, length).copy_(buf.narrow(pos, 0, length))
    return out


@dataclass
class LayerCache:
    """Per-decoder-layer cache for incremental decoding (keys/values of both attentions)."""

    self_kv: KVCache = field(default_factory=KVCache)
    cross_kv: KVCache = field(default_factory=KVCache)

    def reorder(self, index: Tensor) -> None:
        self.self_kv.reorder(index)
        self.cross_kv.reorder(index)


@dataclass
class StepCache:
    """One decoder layer's state in the inference step (`DecoderLayer.step`): the self-attention keys and
    values so far (a `KVCache`, or the layer's part of a model/step_kv.StepKV; the searches reorder them with
    `step_kv.reorder_self_attention`), and the encoder-decoder keys (N, H, S, d_k) and values (N, H, S, d_v),
    projected once."""

    self_kv: KVCache
    cross_k: Tensor
    cross_v: Tensor
