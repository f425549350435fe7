"""The decoder's self-attention keys and values in the inference step, every layer in one buffer (issue 37).

Incremental decoding (section 6.1's searches) keeps each decoder layer's keys and values of the positions so far.
A beam search reorders them after every step (each kept hypothesis takes its parent's rows). With one `KVCache`
per layer that is 2 L copies per step, each a few tensor operations whose fixed cost dominates at batch 1; here the
L layers' keys and values share one buffer, so a reorder is one copy. `Transformer.start_steps` uses it where
d_k = d_v (keys and values of one shape); `KVCache` otherwise. The same values either way: tests hold the step to
the module path.

The buffers are taken from a `BufferPool` that outlives one batch (the `InferenceWeights` of a decoding carry one)
and given back when the search is done (`release_self_attention`): a buffer the allocator has just handed out costs
its pages' first touch (6 ms for the 12.6 MB of 128 rows on an AVX-512 AMD EPYC against 0.4 ms reused), and a
batch of 32 sentences took four such buffers as the capacity doubled, about 5% of its time (issue 37).
"""

from __future__ import annotations

import math
import threading

import torch
from torch import Tensor

from transformer_min.model.kv_cache import KVCache, spare_fits


class BufferPool:
    """Flat buffers handed out to one `StepKV` at a time and taken back when it is released, so the batches of a
    decoding reuse memory whose pages are already touched. A buffer is only ever handed out from the free list,
    so two caches never share one (also across threads: the list is locked); at most `keep` are kept free, the
    largest (4: a search holds two at a time, and the two of the last doubling serve the next batch's smaller ones;
    what stays allocated between batches is at most about twice one batch's peak)."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self._free: list[Tensor] = []
        self._lock = threading.Lock()

    def take(self, numel: int, like: Tensor) -> Tensor:
        """A flat buffer of at least `numel` values of `like`'s dtype and device (the smallest free one that fits,
        else a new one); one made under torch.inference_mode only inside it (elsewhere it cannot be written)."""
        inference = torch.is_inference_mode_enabled()
        with self._lock:
            fits = [i for i, f in enumerate(self._free) if f.numel() >= numel and f.dtype == like.dtype
                    and f.device == like.device and f.is_inference() == inference]
            if fits:
                return self._free.pop(min(fits, key=lambda i: self._free[i].numel()))
        return like.new_empty(numel)

    def __len__(self) -> int:
        """The buffers free now."""
        with self._lock:
            return len(self._free)

    def give(self, t: Tensor | None) -> None:
        """Take back a buffer of `take` (or any view of it) that no cache uses any more: its whole storage."""
        if t is None:
            return
        storage = t.untyped_storage()
        flat = t.new_empty(0).set_(storage, 0, (storage.nbytes() // t.element_size(),))
        with self._lock:
            self._free.append(flat)
            self._free.sort(key=Tensor.numel, reverse=True)
            del self._free[self.keep:]


class StepKV:
    """Keys and values of the L decoder layers' self-attention: one buffer (2 L, N, H, capacity, d), layer l's keys
    at 2 l and its values at 2 l + 1 (rows second: a layer's (N, H, t, d) keys fold into the (N H, t, d) batch of
    eq. (1)'s products without a copy; with rows first the products ran 1.3-2.5x slower at batch 1). The capacity
    grows by doubling; `reorder` writes into the buffer of the step before (kept as a spare), so a beam search
    allocates no new cache per step. Buffers come from `pool` (a new one: nothing reused past this cache) and go
    back to it when replaced by a larger one or at `release`."""

    def __init__(self, num_layers: int, pool: BufferPool | None = None):
        self.num_layers = num_layers
        self.pool = BufferPool() if pool is None else pool
        self.buf: Tensor | None = None
        self.spare: Tensor | None = None
        self.length = 0  # positions filled (in every layer, after a step)

    def _take(self, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """A view of `shape` on a buffer of the pool (given back whole by `BufferPool.give`)."""
        return self.pool.take(math.prod(shape), like)[:math.prod(shape)].view(shape)

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self, i)

    def write(self, i: int, kv: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """kv (N, 2, H, 1, d): layer i's key and value at position t -> its keys and values at positions 0..t,
        (N, H, t + 1, d) each (valid until the next `reorder`)."""
        if self.buf is None or t >= self.buf.size(3):
            self._grow(kv, t)
        kv_all = self.buf[2 * i:2 * i + 2, :, :, :t + 1]  # (2, N, H, t + 1, d)
        kv_all[:, :, :, t:].copy_(kv.transpose(0, 1))
        self.length = t + 1
        return kv_all.unbind(0)

    def _grow(self, kv: Tensor, t: int) -> None:
        """A buffer with room for position t, holding positions 0..t-1 of the one before."""
        if self.buf is None:
            if t > 0:
                raise RuntimeError(f"StepKV: position {t} written to a released cache (positions 0..{t - 1} gone)")
            N, _, H, _, d = kv.shape
            buf = self._take((2 * self.num_layers, N, H, max(t + 1, 16), d), kv)
        else:
            shape = self.buf.shape
            buf = self._take((*shape[:3], max(t + 1, 2 * shape[3]), shape[4]), kv)
            buf.narrow(3, 0, t).copy_(self.buf.narrow(3, 0, t))  # positions 0..t-1
        self._give_back()
        self.buf = buf

    def attend(self, i: int, q: Tensor, kv: Tensor, t: int) -> Tensor | None:
        """Eq. (1) of layer i taken by the cache itself (model/beam_kv.py); None here: the layer calls `write`."""
        return None

    def reorder(self, index: Tensor, beams: int | None = None) -> None:
        """Keep rows `index` of every layer (beams reordered; fewer rows: finished sentences dropped), written into
        the spare buffer (the one of the step before) where it has room. `beams` (the rows per sentence after it,
        model/beam_kv.py) is not needed here."""
        if self.buf is None:
            return
        self.buf, self.spare = self._select(self.buf, self.spare, index), self.buf

    def _select(self, buf: Tensor, spare: Tensor | None, index: Tensor) -> Tensor:
        """buf's entries `index` along dim 1 (rows here; model/beam_kv.py's sentence blocks), positions 0..length-1
        (dim 3) copied, written into `spare` where it fits, else into a buffer of the pool (`spare` given back)."""
        n = index.numel()
        if not spare_fits(buf, spare, n, 1):
            self.pool.give(spare)
            spare = self._take((buf.size(0), n, *buf.shape[2:]), buf)
        out = spare if spare.size(1) == n else spare.narrow(1, 0, n)  # (2 L, n, ...)
        torch.index_select(buf.narrow(3, 0, self.length), 1, index, out=out.narrow(3, 0, self.length))
        return out

    def release(self) -> None:
        """Give both buffers back to the pool; the cache is empty after it (a search calls it when done)."""
        self._give_back()
        self.length = 0

    def _give_back(self) -> None:
        self.pool.give(self.buf)
        self.pool.give(self.spare)
        self.buf = self.spare = None


class LayerKV:
    """Layer i's part of a `StepKV`: the `append_kv` of a `KVCache`, writing into the shared buffer."""

    __slots__ = ("owner", "index")

    def __init__(self, owner: StepKV, index: int):
        self.owner, self.index = owner, index

    def append_kv(self, kv: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """kv (N, 2, H, 1, d): this layer's key and value at position t -> its keys and values at 0..t."""
        return self.owner.write(self.index, kv, t)

    def attend(self, q: Tensor, kv: Tensor, t: int) -> Tensor | None:
        """kv written and eq. (1) for q (N, H, 1, d) taken by the owner where it keeps beam slots (BeamKV) -> (N, H,
        1, d); None: call `append_kv` and attend to what it returns."""
        return self.owner.attend(self.index, q, kv, t)


def to_places(x: Tensor, places: Tensor) -> Tensor:
    """x (N, ...) with entry i moved to place places[i] (`places` a permutation of 0..N-1): the inverse of
    x.index_select(0, places), as the caches' row order and the search's differ (decoding/lean.py)."""
    return torch.empty_like(x).index_copy_(0, places, x)


def reorder_self_attention(caches: list, index: Tensor, beams: int | None = None) -> None:
    """Keep rows `index` of the self-attention keys and values of `caches` (`Transformer.start_steps`): the one
    shared buffer once, or each layer's `KVCache`. `beams`: the rows per sentence after the reorder where each
    sentence's rows are consecutive and equal in number, else None (model/beam_kv.py)."""
    first = caches[0].self_kv if caches else None
    if isinstance(first, LayerKV):
        first.owner.reorder(index, beams)
        return
    for cache in caches:
        cache.self_kv.reorder(index)


def release_self_attention(caches: list) -> None:
    """Give the buffers of `caches`' shared keys and values back to their pool (the search is done with them); each
    layer's own `KVCache` is left to the garbage collector."""
    first = caches[0].self_kv if caches else None
    if isinstance(first, LayerKV):
        first.owner.release()


def self_attention_caches(num_layers: int, shared: bool, pool: BufferPool | None = None,
                          kind: type[StepKV] = StepKV) -> list[LayerKV] | list[KVCache]:
    """Each decoder layer's self-attention cache for the step: parts of one `kind` (StepKV, or model/beam_kv.py's
    BeamKV) where `shared` (d_k = d_v), its buffers from `pool`, else a `KVCache` each."""
    if shared:
        kv = kind(num_layers, pool)
        return [kv.layer(i) for i in range(num_layers)]
    return [KVCache() for _ in range(num_layers)]
