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


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A copy-task run of 6 updates with a step checkpoint every 2."""
    from transformer_min.core.config import Config, ModelConfig, TrainConfig, VocabConfig
    from transformer_min.cli.train import train

    tmp = tmp_path_factory.mktemp("avg")
    cfg = Config(model=ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, dropout=0.0, max_len=32),
                 vocab=VocabConfig(src_size=12, tgt_size=12),
                 train=TrainConfig(task="copy", steps=6, checkpoint_interval=2, keep_last=5, eval_interval=1000,
                                   out_dir=str(tmp / "runs"), name="copy", seed=1, device="cpu"))
    _, run_dir = train(cfg)
    return run_dir


def test_the_average_is_written_as_safetensors_and_read_back(copy_run):
    """Issue 36: checkpoints/averaged.safetensors holds the mean of the step checkpoints' weights (computed here
    from torch.load of each), the config, step and extra; it is not a pickle; a .pt --out keeps torch.save."""
    from transformer_min.model.saved import list_checkpoints, load_model, read_checkpoint
    from transformer_min.training.averaging import average_run

    out, used = average_run(copy_run, last=3)
    assert out == copy_run / "checkpoints" / "averaged.safetensors" and len(used) == 3
    raw = out.read_bytes()
    header = int.from_bytes(raw[:8], "little")
    assert raw[8:9] == b"{" and b'"format"' in raw[8:8 + header]  # JSON header, then bytes: no pickle opcode
    steps = [torch.load(p, weights_only=True) for p in list_checkpoints(copy_run)[-3:]]
    state = read_checkpoint(out)
    for k, v in steps[-1]["model"].items():
        want = sum(s["model"][k].double() for s in steps) / 3 if v.is_floating_point() else v
        assert torch.allclose(state["model"][k].double(), want, atol=1e-7), k
    assert state["config"] == steps[-1]["config"] and state["step"] == steps[-1]["step"] == 6
    assert state["extra"]["averaged"] == [p.name for p in used] and state["optimizer"] is None
    model, cfg = load_model(out)
    assert cfg.train.task == "copy" and not model.training
    legacy, _ = average_run(copy_run, last=2, out=copy_run / "avg.pt")
    assert legacy.read_bytes()[:2] == b"PK" and "averaged" in read_checkpoint(legacy)["extra"]  # torch's zip
    again, _ = average_run(copy_run, last=2)  # an earlier average is recognised and replaced
    assert read_checkpoint(again)["extra"]["averaged"] == [p.name for p in used[1:]]


def test_a_damaged_safetensors_checkpoint_is_named(tmp_path):
    from transformer_min.model.saved import read_checkpoint

    bad = tmp_path / "averaged.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(CheckpointError, match=r"averaged.safetensors: not a readable safetensors checkpoint"):
        read_checkpoint(bad)
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(bad))  # a safetensors file, but not one of ours
    with pytest.raises(CheckpointError, match=r"without tmin's 'config' entry"):
        read_checkpoint(bad)
