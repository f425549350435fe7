"""model/step_kv.py: the decoder's self-attention keys and values in one buffer, taken from a pool that the batches
of one decoding share (issue 37). The cache is held to a plain list of every position written, reordered with
torch's own indexing; the pool never hands one buffer to two caches."""

import pytest
import torch

from transformer_min.model.step_kv import BufferPool, StepKV


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def test_a_given_buffer_is_taken_again_and_a_larger_or_other_dtype_is_new():
    pool = BufferPool()
    like = torch.zeros(1)
    a = pool.take(100, like)
    assert a.numel() == 100 and a.dtype == torch.float32
    pool.give(a)
    b = pool.take(60, like)  # fits in a: the same memory
    assert b.data_ptr() == a.data_ptr()
    pool.give(b)
    assert pool.take(101, like).data_ptr() != a.data_ptr()  # too small: a new one
    assert pool.take(10, torch.zeros(1, dtype=torch.float64)).dtype == torch.float64  # never another dtype's
    c = pool.take(10, like)
    assert c.data_ptr() == a.data_ptr()  # still free, and taken once only
    assert pool.take(10, like).data_ptr() != c.data_ptr()


def test_the_pool_keeps_at_most_keep_buffers_the_largest():
    pool = BufferPool(keep=2)
    flats = [torch.empty(n) for n in (5, 50, 20)]
    for f in flats:
        pool.give(f)
    got = {pool.take(1, flats[0]).numel() for _ in range(2)}
    assert got == {50, 20}
    assert pool.take(1, flats[0]).data_ptr() not in {f.data_ptr() for f in flats}


def _drive(kv: StepKV, steps: int, N: int, g: torch.Generator, history: list, rows: list | None = None) -> None:
    """Writes `steps` positions into layer 0 and 1 of `kv`, reordering the rows after each (to `rows[t]` rows where
    given: more rows as a search's first step makes, fewer as finished sentences leave); `history` keeps what the
    cache must hold (the reference: every position's keys/values, reordered with plain indexing)."""
    H, d = 2, 3
    for t in range(len(history), len(history) + steps):
        kv_t = [torch.randn(N, 2, H, 1, d, generator=g) for _ in range(2)]
        outs = [kv.write(i, kv_t[i], t) for i in range(2)]
        history.append(kv_t)
        for i in range(2):
            want_k = torch.cat([h[i][:, 0] for h in history], 2)  # (N, H, t + 1, d)
            want_v = torch.cat([h[i][:, 1] for h in history], 2)
            assert torch.equal(outs[i][0], want_k) and torch.equal(outs[i][1], want_v)
        index = torch.randint(0, N, (N if rows is None else rows[t],), generator=g)
        N = index.numel()
        kv.reorder(index)
        history[:] = [[x[index] for x in h] for h in history]


def test_positions_past_the_doubled_capacity_and_reorders_equal_plain_indexing():
    g = torch.Generator().manual_seed(0)
    kv, history = StepKV(2, BufferPool()), []
    _drive(kv, 40, 5, g, history)  # capacity 16 -> 32 -> 64
    assert kv.buf.size(3) == 64


def test_two_caches_on_one_pool_never_share_memory_and_both_stay_exact():
    g = torch.Generator().manual_seed(1)
    pool = BufferPool()
    a, b = StepKV(2, pool), StepKV(2, pool)
    ha, hb = [], []
    for _ in range(4):  # interleaved, as two searches sharing one decoding's weights would be
        _drive(a, 5, 4, g, ha)
        _drive(b, 5, 3, g, hb)
        spans = [_storage_span(x) for x in (a.buf, a.spare, b.buf, b.spare)]
        assert all(s1[1] <= s2[0] or s2[1] <= s1[0] for i, s1 in enumerate(spans) for s2 in spans[i + 1:])


def test_rows_growing_and_shrinking_on_a_shared_pool_stay_exact():
    g = torch.Generator().manual_seed(4)
    pool = BufferPool()
    other, h_other = StepKV(2, pool), []
    _drive(other, 2, 3, g, h_other)
    kv, history = StepKV(2, pool), []
    rows = [8, 8, 8, 5, 5, 12, 12, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2]  # a beam's first step, then sentences end
    _drive(kv, 20, 2, g, history, rows)
    assert kv.buf.size(1) == rows[-1] and kv.buf.size(3) == 32  # shrunk to the last rows, past one doubling
    want = torch.cat([h[0][:, 0] for h in history], 2)  # layer 0's keys, reordered with plain indexing
    assert torch.equal(kv.buf[0, :, :, :20], want)
    _drive(other, 2, 3, g, h_other)  # the cache beside it still holds its own keys and values
    spans = [_storage_span(x) for x in (kv.buf, kv.spare, other.buf, other.spare)]
    assert all(s1[1] <= s2[0] or s2[1] <= s1[0] for i, s1 in enumerate(spans) for s2 in spans[i + 1:])


def test_a_released_cache_gives_its_buffers_back_and_refuses_a_later_position():
    pool = BufferPool()
    kv = StepKV(2, pool)
    _drive(kv, 3, 4, torch.Generator().manual_seed(2), [])
    used = {_storage_span(kv.buf)[0], _storage_span(kv.spare)[0]}
    kv.release()
    assert kv.buf is None and kv.spare is None
    again = StepKV(2, pool)
    _drive(again, 1, 4, torch.Generator().manual_seed(3), [])
    assert _storage_span(again.buf)[0] in used  # the next batch's cache reuses the memory
    with pytest.raises(RuntimeError, match="released"):
        kv.write(0, torch.zeros(4, 2, 2, 1, 3), 3)


def test_to_places_undoes_the_selection_by_the_same_permutation():
    """to_places(x, p) puts entry i at place p[i]: selecting rows p of it gives x back, for rows and for vectors."""
    from transformer_min.model.step_kv import to_places

    g = torch.Generator().manual_seed(5)
    for shape in ((7,), (7, 3)):
        x = torch.randn(*shape, generator=g)
        p = torch.randperm(7, generator=g)
        y = to_places(x, p)
        assert torch.equal(y.index_select(0, p), x)
        assert all(torch.equal(y[int(p[i])], x[i]) for i in range(7))
