"""decoding/top_k.py against independent references: torch.topk's values, and a full stable sort of each row
for the values and their indices."""

import pytest
import torch

from transformer_min.decoding.top_k import GROUPS, MIN_WIDTH, top_k


def stable_reference(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest per row by a full stable sort (equal scores lowest index first)."""
    values, index = x.sort(dim=-1, descending=True, stable=True)
    return values[:, :k], index[:, :k]


@pytest.mark.parametrize("rows", [1, 3, 32])
@pytest.mark.parametrize("width", [4 * 8000, 4 * 8000 + 5, MIN_WIDTH, 3 * 4999])
def test_distinct_scores_match_torch_topk(rows, width):
    torch.manual_seed(rows + width)
    x = torch.randn(rows, width).log_softmax(-1)  # log-probabilities: distinct almost surely
    k = 8
    values, index = top_k(x, k)
    ref_values, ref_index = x.topk(k, dim=-1)
    assert torch.equal(values, ref_values)
    assert torch.equal(index, ref_index)


@pytest.mark.parametrize("width", [32000, 32003, 9000])
def test_ties_and_minus_infinity(width):
    """Scores with many equal values and -inf (the t2t search's empty beams at its first step): the k largest
    values, at k distinct indices that hold them (which of equal scores is left open, as in torch.topk)."""
    torch.manual_seed(width)
    for _ in range(20):
        x = torch.randint(-5, 3, (4, width)).float()
        x[x == -5] = float("-inf")
        for k in (1, 8, 40):
            values, index = top_k(x, k)
            assert torch.equal(values, stable_reference(x, k)[0])
            assert torch.equal(x.gather(1, index), values)
            assert all(len(set(row)) == k for row in index.tolist())
            assert torch.equal(top_k(x, k)[1], index)  # deterministic


def test_the_best_in_one_group_and_at_the_tail():
    """All k best in the same strided group, or after the last whole slice: the cases the argument rests on."""
    width = 32000 + 7
    m = width // GROUPS
    x = torch.zeros(2, width)
    x[0, torch.arange(5, GROUPS * m, m)] = torch.arange(GROUPS, dtype=torch.float32) + 1  # one group, every slice
    x[1, -7:] = torch.arange(7, dtype=torch.float32) + 1  # the leftover scores
    values, index = top_k(x, 8)
    ref_values, ref_index = stable_reference(x, 8)
    assert torch.equal(values, ref_values)
    assert torch.equal(index[0], ref_index[0])  # 8 of the group's distinct scores
    assert index[1, :7].tolist() == list(range(width - 1, width - 8, -1))  # then one of the equal zeros
    assert x[1, index[1, 7]] == 0


@pytest.mark.parametrize("width,k", [(100, 8), (MIN_WIDTH, MIN_WIDTH // GROUPS)])
def test_narrow_rows_or_wide_k_fall_back_to_torch_topk(width, k):
    x = torch.randn(2, width)
    values, index = top_k(x, k)
    ref_values, ref_index = x.topk(k, dim=-1)
    assert torch.equal(values, ref_values) and torch.equal(index, ref_index)
