"""The decoder's self-attention keys and values for a beam search over many sentences (issue 37): each beam's keys
and values stay where they were written, and each hypothesis reads its ancestors' through a table.

With one row per hypothesis (model/step_kv.py), every search step copies all positions of every kept hypothesis
(its parent's rows), and eq. (1) then reads them again: at batch 32 (128 rows) the copy and the products over the
caches took a quarter of int8's time, both bound by memory traffic. Here a sentence's G beams are G slots of one
block: position s of slot j holds what beam j computed at step s and is never moved; `anc[b, i, s]` says through
which slot hypothesis i of sentence b descends at position s. A reorder moves only that table (integers per row and
position). Eq. (1) for the G queries of a sentence (`attend`) takes the scores against every slot at every position
in one batched product (G queries x G (t + 1) keys: the block read once), keeps each query's own ancestor's
(`gather`), takes the softmax over the positions, and sums the values with the weights placed at the ancestors'
slots (zeros elsewhere): the same function as the row cache's; the products round differently (about 1e-7).

`BeamKV` starts as a `StepKV` (one row per hypothesis) and takes the slots at the first reorder into equal groups of
several rows per sentence with `MANY_FROM` rows or more (a beam of 4 for 4 sentences or more). The table's extra
operations and the G-fold products pay off with the rows: on an AVX-512 AMD EPYC, 0.96-0.98 of the time at 128 rows,
0.99 at 32, even at 16 (docs/performance.md); batch 1's 4 rows keep the row cache. A later reorder that does not
keep each sentence's rows together (no search here makes one) turns it back into rows, the same values.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from transformer_min.core.speed import MANY_FROM
from transformer_min.model.step_kv import StepKV


class BeamKV(StepKV):
    """`StepKV` whose keys and values move into beam slots (2 L, B, H, capacity, G, d) once the searched rows come in
    equal groups per sentence; the layers then call `attend` (written and attended in one) instead of `write`."""

    def __init__(self, num_layers: int, pool=None):
        super().__init__(num_layers, pool)
        self.slots: Tensor | None = None  # None: the rows of StepKV hold the cache
        self.slot_spare: Tensor | None = None  # the block buffer a drop of sentences writes into
        self.anc: Tensor | None = None  # (B, G, capacity) int64: the slot each hypothesis reads at each position
        self._table: tuple[Tensor, Tensor] | None = None  # this position's gather index and one-hot of `anc`

    def attend(self, i: int, q: Tensor, kv: Tensor, t: int) -> Tensor | None:
        """Layer i at position t: kv (N, 2, H, 1, d) written to the slots, then eq. (1) for q (N, H, 1, d) over
        positions 0..t of each row's ancestors -> (N, H, 1, d); None while the cache holds rows (`write` then)."""
        if self.slots is None:
            return None
        L2, B, H, cap, G, d = self.slots.shape
        if t >= cap:
            self._grow_slots(t)
        self.slots[2 * i:2 * i + 2, :, :, t].copy_(kv.view(B, G, 2, H, d).permute(2, 0, 3, 1, 4))  # (2, B, H, G, d)
        if i == 0:
            self._start_position(t)
        T = t + 1
        ix, onehot = self._table  # (B, 1, G, T, 1), (B, 1, G, T, G)
        k = self.slots[2 * i, :, :, :T].view(B, H, T * G, d)  # every slot of every position: (B, H, T G, d)
        v = self.slots[2 * i + 1, :, :, :T].view(B, H, T * G, d)
        qb = q.reshape(B, G, H, d).transpose(1, 2)  # (B, H, G, d): a sentence's G queries
        every = torch.matmul(qb, k.transpose(-2, -1)).view(B, H, G, T, G)  # q_i . k_(s, j)
        scores = every.gather(-1, ix.expand(B, H, G, T, 1)).squeeze(-1).mul_(1.0 / math.sqrt(d))  # (B, H, G, T)
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul((weights.unsqueeze(-1) * onehot).view(B, H, G, T * G), v)  # (B, H, G, d)
        return out.transpose(1, 2).reshape(B * G, H, 1, d)

    def _start_position(self, t: int) -> None:
        """Position t is each hypothesis's own slot; the table of positions 0..t as the layers' products take it."""
        B, G = self.anc.shape[:2]
        self.anc[:, :, t] = torch.arange(G, device=self.anc.device)
        ix = self.anc[:, :, :t + 1].view(B, 1, G, t + 1, 1)
        onehot = torch.zeros((B, 1, G, t + 1, G), dtype=self.slots.dtype, device=ix.device).scatter_(-1, ix, 1.0)
        self._table = (ix, onehot)
        self.length = t + 1

    def reorder(self, index: Tensor, beams: int | None = None) -> None:
        """Keep rows `index` (as `StepKV.reorder`). `beams`: the rows per sentence after it where each sentence's rows
        are consecutive and equal in number (the stepper knows which row is of which sentence), else None."""
        if self.slots is not None:
            if not self._reorder_slots(index):
                self._to_rows(index)
            return
        n = index.numel()
        if beams is not None and beams > 1 and n >= MANY_FROM and n % beams == 0 and self.buf is not None:
            self._to_slots(index, beams)
        else:
            super().reorder(index, beams)

    def _reorder_slots(self, index: Tensor) -> bool:
        """Move the table (and drop finished sentences' blocks); False where a new group of G rows takes parents
        from more than one sentence's block (the slots cannot hold that)."""
        B, G, cap = self.anc.shape
        if index.numel() % G:
            return False
        block = torch.div(index, G, rounding_mode="floor").view(-1, G)  # (B', G): each parent's block
        first = block[:, 0]
        if not bool((block == first[:, None]).all()):
            return False
        self.anc = self.anc.view(B * G, cap).index_select(0, index).view(-1, G, cap)
        if first.numel() != B or not torch.equal(first, torch.arange(B, device=first.device)):
            self._keep_blocks(first)
        return True

    def _keep_blocks(self, first: Tensor) -> None:
        """Keep blocks `first` (n,) (finished sentences dropped), block j of the n taken from block first[j]. Where
        every block that moves comes from past the first n (decoding/lean.py fills the holes from the end), only those
        are copied, into the holes; otherwise every kept block goes into the spare block buffer (the one before the
        last drop: a fresh buffer's first touch cost more than the copy), as StepKV reorders its rows."""
        n = first.numel()
        moved = (first != torch.arange(n, device=first.device)).nonzero().squeeze(1)
        source = first.index_select(0, moved)
        if bool((source >= n).all()):  # the blocks past n are of finished sentences once these have left
            T = self.length
            for dst, src in zip(moved.tolist(), source.tolist()):
                self.slots[:, dst, :, :T].copy_(self.slots[:, src, :, :T])  # (2 L, H, T, G, d)
            self.slots = self.slots.narrow(1, 0, n)
            return
        self.slots, self.slot_spare = self._select(self.slots, self.slot_spare, first), self.slots

    def _to_slots(self, index: Tensor, beams: int) -> None:
        """Rows -> slots: the kept rows' positions so far, hypothesis j of each sentence in slot j."""
        T, cap = self.length, self.buf.size(3)
        rows = self.buf.narrow(3, 0, T).index_select(1, index)  # (2 L, n, H, T, d)
        L2, n, H, _, d = rows.shape
        B = n // beams
        slots = self._take((L2, B, H, cap, beams, d), rows)
        slots[:, :, :, :T].copy_(rows.view(L2, B, beams, H, T, d).permute(0, 1, 3, 4, 2, 5))
        anc = torch.empty((B, beams, cap), dtype=torch.long, device=rows.device)
        anc[:, :, :T] = torch.arange(beams, device=rows.device)[:, None]
        self._give_back()
        self.slots, self.anc = slots, anc

    def _to_rows(self, index: Tensor) -> None:
        """Slots -> rows, for a reorder the slots cannot follow: row r takes row index[r]'s ancestors' values."""
        B, G, cap = self.anc.shape
        T, (L2, _, H, _, _, d) = self.length, self.slots.shape
        slot = self.anc.view(B * G, cap)[index, :T]  # (n, T)
        block = torch.div(index, G, rounding_mode="floor")[:, None]  # (n, 1)
        values = self.slots[:, block, :, torch.arange(T, device=index.device)[None, :], slot]  # (n, T, 2 L, H, d)
        buf = self._take((L2, index.numel(), H, cap, d), values)
        buf[:, :, :, :T].copy_(values.permute(2, 0, 3, 1, 4))
        self._give_back()
        self.buf = buf

    def _grow_slots(self, t: int) -> None:
        """Room for position t: twice the capacity, positions 0..t-1 and the table kept."""
        shape = self.slots.shape
        cap = max(t + 1, 2 * shape[3])
        slots = self._take((*shape[:3], cap, *shape[4:]), self.slots)
        slots.narrow(3, 0, t).copy_(self.slots.narrow(3, 0, t))
        anc = torch.empty((*self.anc.shape[:2], cap), dtype=torch.long, device=self.anc.device)
        anc[:, :, :t] = self.anc[:, :, :t]
        self.pool.give(self.slots)
        self.pool.give(self.slot_spare)  # of the old capacity
        self.slots, self.anc, self.slot_spare = slots, anc, None

    def _give_back(self) -> None:
        super()._give_back()
        self.pool.give(self.slots)
        self.pool.give(self.slot_spare)
        self.slots = self.slot_spare = self.anc = self._table = None
