"""The decoder's self-attention keys and values in the inference step, every layer in one buffer (issue 37).

Incremental decoding (section 6.1's searches) keeps each decoder layer's keys and values of the positions so far.
A beam search reorders them after every step (each kept hypothesis takes its parent's rows). With one `KVCache`
per layer that is 2 L copies per step, each a few tensor operations whose fixed cost dominates at batch 1; here the
L layers' keys and values share one buffer, so a reorder is one copy. `Transformer.start_steps` uses it where
d_k = d_v (keys and values of one shape); `KVCache` otherwise. The same values either way: tests hold the step to
the module path.
"""

from __future__ import annotations

from torch import Tensor

from transformer_min.model.kv_cache import KVCache, grow, select_rows


class StepKV:
    """Keys and values of the L decoder layers' self-attention: one buffer (2 L, N, H, capacity, d), layer l's keys
    at 2 l and its values at 2 l + 1 (rows second: a layer's (N, H, t, d) keys fold into the (N H, t, d) batch of
    eq. (1)'s products without a copy; with rows first the products ran 1.3-2.5x slower at batch 1). The capacity
    grows by doubling; `reorder` writes into the buffer of the step before (kept as a spare), so a beam search
    allocates no new cache per step."""

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self.buf: Tensor | None = None
        self.spare: Tensor | None = None
        self.length = 0  # positions filled (in every layer, after a step)

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
            N, _, H, _, d = kv.shape
            self.buf = kv.new_empty((2 * self.num_layers, N, H, max(t + 1, 16), d))
        else:
            self.buf = grow(self.buf, max(t + 1, 2 * self.buf.size(3)), t, pos=3)
        self.spare = None

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` of every layer (beams reordered; fewer rows: finished sentences dropped)."""
        if self.buf is not None:
            self.buf, self.spare = select_rows(self.buf, self.spare, index, self.length, dim=1), self.buf


class LayerKV:
    """Layer i's part of a `StepKV`: the `append_kv` of a `KVCache`, writing into the shared buffer."""

    __slots__ = ("owner", "index")

    def __init__(self, owner: StepKV, index: int):
        self.owner, self.index = owner, index

    def append_kv(self, kv: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """kv (N, 2, H, 1, d): this layer's key and value at position t -> its keys and values at 0..t."""
        return self.owner.write(self.index, kv, t)


def reorder_self_attention(caches: list, index: Tensor) -> None:
    """Keep rows `index` of the self-attention keys and values of `caches` (`Transformer.start_steps`): the one
    shared buffer once, or each layer's `KVCache`."""
    first = caches[0].self_kv if caches else None
    if isinstance(first, LayerKV):
        first.owner.reorder(index)
        return
    for cache in caches:
        cache.self_kv.reorder(index)


def self_attention_caches(num_layers: int, shared: bool) -> list[LayerKV] | list[KVCache]:
    """Each decoder layer's self-attention cache for the step: parts of one `StepKV` where `shared` (d_k = d_v),
    else a `KVCache` each."""
    if shared:
        kv = StepKV(num_layers)
        return [kv.layer(i) for i in range(num_layers)]
    return [KVCache() for _ in range(num_layers)]
