"""model/beam_kv.py: the beam search's keys and values kept where each beam wrote them, read through each hypothesis's
ancestry (issue 37). Held to eq. (1) written out in float64 over a plain list of every position's keys and values,
reordered with torch's own indexing: while the cache holds rows, after it takes beam slots, as sentences end, past
the doubled capacity, and back to rows after a reorder the slots cannot follow."""

from __future__ import annotations

import math

import torch

from transformer_min.core.speed import MANY_FROM
from transformer_min.model.beam_kv import BeamKV
from transformer_min.model.step_kv import BufferPool

L, H, D = 2, 2, 8


def _eq1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q K^T / sqrt(d)) V in float64: q (N, H, 1, d), k, v (N, H, T, d) -> (N, H, 1, d)."""
    q, k, v = q.double(), k.double(), v.double()
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v


class Driver:
    """Steps a BeamKV as the decoder's layers do (`attend`, else `write` and eq. (1) on what it returns), checks each
    layer's output against the reference, then reorders both."""

    def __init__(self, kv: BeamKV, rows: int, seed: int):
        self.kv, self.rows, self.g = kv, rows, torch.Generator().manual_seed(seed)
        self.history: list[list[torch.Tensor]] = []  # per position: per layer (N, 2, H, 1, d)
        self.modes: list[str] = []

    def step(self) -> None:
        t, N = len(self.history), self.rows
        kv_t = [torch.randn(N, 2, H, 1, D, generator=self.g) for _ in range(L)]
        self.history.append(kv_t)
        self.modes.append("rows" if self.kv.slots is None else "slots")
        for i in range(L):
            q = torch.randn(N, H, 1, D, generator=self.g)
            out = self.kv.attend(i, q, kv_t[i], t)
            if out is None:
                k_all, v_all = self.kv.write(i, kv_t[i], t)
                out = _eq1(q, k_all, v_all).float()
            k = torch.cat([h[i][:, 0] for h in self.history], 2)  # (N, H, t + 1, d)
            v = torch.cat([h[i][:, 1] for h in self.history], 2)
            assert out.shape == (N, H, 1, D)
            torch.testing.assert_close(out.double(), _eq1(q, k, v), atol=1e-5, rtol=0)

    def reorder(self, index: torch.Tensor, beams: int | None) -> None:
        self.kv.reorder(index, beams)
        self.history = [[x[index] for x in h] for h in self.history]
        self.rows = index.numel()


def _within(sentences: int, beams: int, g: torch.Generator, from_rows: int | None = None) -> torch.Tensor:
    """Each sentence's new beams, drawn from its own rows (`from_rows` each before; default `beams`)."""
    per = beams if from_rows is None else from_rows
    parents = torch.randint(0, per, (sentences, beams), generator=g)
    return (torch.arange(sentences)[:, None] * per + parents).view(-1)


def _in_slots(B: int, G: int, seed: int) -> tuple[BeamKV, Driver]:
    """A cache of B sentences x G beams that has taken slots, three positions in."""
    kv = BeamKV(L, BufferPool())
    d = Driver(kv, rows=B * G, seed=seed)
    for _ in range(3):
        d.step()
        d.reorder(_within(B, G, d.g), G)
    assert kv.slots is not None
    return kv, d


def test_a_beam_search_over_many_sentences_reads_each_hypothesis_ancestry():
    G, B = 4, 6  # 24 rows: at least MANY_FROM
    assert B * G >= MANY_FROM
    kv = BeamKV(L, BufferPool())
    d = Driver(kv, rows=B, seed=0)  # the first step: one row per sentence (the beams are one BOS)
    d.step()
    d.reorder(_within(B, G, d.g, from_rows=1), G)
    assert kv.slots is not None and kv.slots.shape[1] == B  # taken at once into slots
    for t in range(1, 40):  # capacity 16 -> 32 -> 64
        d.step()
        live = d.rows // G
        if t in (5, 9, 20):  # sentences end: the middle one, the first, the last
            keep = torch.tensor([s for s in range(live) if s != {5: live // 2, 9: 0, 20: live - 1}[t]])
            index = (keep[:, None] * G + torch.randint(0, G, (keep.numel(), G), generator=d.g)).view(-1)
        else:
            index = _within(live, G, d.g)
        d.reorder(index, G)
        assert kv.slots is not None
    assert d.modes[0] == "rows" and set(d.modes[1:]) == {"slots"}
    assert kv.slots.shape[1] == B - 3 and kv.slots.shape[3] == 64


def test_a_reorder_across_sentences_turns_the_slots_back_into_rows():
    G, B = 4, 5
    kv, d = _in_slots(B, G, seed=1)
    index = _within(B, G, d.g)
    index[0] = index[-1]  # sentence 0's first beam takes the last sentence's row: no slot can hold that
    d.reorder(index, None)
    assert kv.slots is None and kv.buf is not None
    for _ in range(3):  # rows again, exact, and no slots without equal groups
        d.step()
        d.reorder(torch.randint(0, d.rows, (d.rows,), generator=d.g), None)
        assert kv.slots is None


def test_few_rows_or_no_groups_keep_the_rows():
    for rows, beams in ((4, 4), (MANY_FROM - 1, 1), (MANY_FROM * 2, None)):
        kv = BeamKV(L, BufferPool())
        d = Driver(kv, rows=rows, seed=2)
        for _ in range(3):
            d.step()
            d.reorder(torch.arange(rows), beams)
        assert kv.slots is None, (rows, beams)


def test_release_gives_the_slots_back_to_the_pool():
    pool = BufferPool()
    kv = BeamKV(L, pool)
    d = Driver(kv, rows=MANY_FROM, seed=3)
    d.step()
    d.reorder(_within(MANY_FROM // 4, 4, d.g), 4)
    slots = kv.slots.untyped_storage().data_ptr()
    kv.release()
    assert kv.slots is None and kv.anc is None and kv.buf is None
    assert slots in {f.untyped_storage().data_ptr() for f in pool._free}


def test_finished_sentences_leave_holes_filled_from_the_end_without_copying_the_rest():
    """A drop whose kept blocks stay in place, with blocks past the new end moved into the holes (as the lean stepper
    orders them), copies only the moved blocks in the slots' own buffer; any other drop selects into the spare. Both
    exact against eq. (1)."""
    G, B = 4, 6
    kv, d = _in_slots(B, G, seed=4)
    storage = kv.slots.untyped_storage().data_ptr()
    # sentences in blocks 1 and 3 end: block 0 and 2 stay, blocks 5 and 4 move into 1 and 3 (the caches' new order)
    first = torch.tensor([0, 5, 2, 4])
    d.step()
    d.reorder((first[:, None] * G + torch.randint(0, G, (4, G), generator=d.g)).view(-1), G)
    assert kv.slots.shape[1] == 4 and kv.slots.untyped_storage().data_ptr() == storage  # no new buffer
    assert kv.slot_spare is None or kv.slot_spare.untyped_storage().data_ptr() != storage
    for _ in range(2):
        d.step()
        d.reorder(_within(4, G, d.g), G)
    first = torch.tensor([2, 0, 3])  # a block moves to a lower place from below the new end: all into the spare
    d.step()
    d.reorder((first[:, None] * G + torch.randint(0, G, (3, G), generator=d.g)).view(-1), G)
    assert kv.slots.shape[1] == 3 and kv.slots.untyped_storage().data_ptr() != storage
    for _ in range(20):  # past the doubled capacity, still exact
        d.step()
        d.reorder(_within(3, G, d.g), G)
    assert set(d.modes[1:]) == {"slots"}
