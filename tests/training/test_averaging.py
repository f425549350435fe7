import pytest
import torch

from transformer_min.core.errors import CheckpointError
from transformer_min.training.averaging import average_states


def test_average_of_two_checkpoints_is_the_mean_of_their_tensors():
    a = {"model": {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}, "path": "a"}
    b = {"model": {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(3)}, "path": "b"}
    avg = average_states([a, b])
    assert torch.equal(avg["w"], torch.tensor([2.0, 4.0])) and avg["n"].item() == 3


def test_checkpoints_of_different_shapes_name_both_files_and_the_tensor():
    a = {"model": {"w": torch.zeros(2, 3), "v": torch.zeros(4)}, "path": "runs/x/step_1.pt"}
    b = {"model": {"w": torch.zeros(2, 3), "v": torch.zeros(5)}, "path": "runs/y/step_2.pt"}
    with pytest.raises(CheckpointError) as e:
        average_states([a, b])
    msg = str(e.value)
    assert "runs/x/step_1.pt" in msg and "runs/y/step_2.pt" in msg and "'v'" in msg
    assert "(4,)" in msg and "(5,)" in msg and "one run only" in msg
    c = {"model": {"w": torch.zeros(2, 3)}, "path": "runs/z/step_3.pt"}
    with pytest.raises(CheckpointError, match="tensor 'v' is in only one of them"):
        average_states([a, c])
