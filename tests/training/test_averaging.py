import torch

from transformer_min.training.averaging import average_states


def test_average_of_two_checkpoints_is_the_mean_of_their_tensors():
    a = {"model": {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}, "path": "a"}
    b = {"model": {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(3)}, "path": "b"}
    avg = average_states([a, b])
    assert torch.equal(avg["w"], torch.tensor([2.0, 4.0])) and avg["n"].item() == 3
