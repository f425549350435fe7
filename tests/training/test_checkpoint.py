"""Reading checkpoints: what is not one is named as such, pickled code is refused without running,
required entries are checked, a damaged newest file falls back to the previous one."""

import logging
import os
import pickle

import pytest
import torch

from transformer_min.core.errors import CheckpointError
from transformer_min.core import messages
from transformer_min.model import saved as ckpt
from transformer_min.model import saved_scan as scan


class Payload:
    """Pickles as a call of `os.system`: loading it with plain pickle would run a shell command."""

    def __reduce__(self):
        return (os.system, ("touch SHOULD_NOT_EXIST",))


def _good(path, step=1, **extra):
    state = {"format": ckpt.FORMAT, "config": {}, "step": step, "model": {"w": torch.ones(3) * step}, **extra}
    torch.save(state, path)
    return path


def test_pickletools_finds_the_global_without_running_it(tmp_path):
    for proto in (0, 2, 4, 5):
        names = scan.pickled_globals(pickle.dumps({"a": Payload()}, protocol=proto))
        assert names and names[0].endswith(".system"), (proto, names)
    assert scan.pickled_globals(b'{"step": 1}\n') == []  # text that is not a pickle names nothing
    assert scan.pickled_globals(b"config\nvalue\n") == []  # starts like GLOBAL but never reaches STOP


@pytest.mark.parametrize("proto", [0, 2, 4])
def test_pickled_code_is_refused_and_named(tmp_path, monkeypatch, proto):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "evil.pt"
    bad.write_bytes(pickle.dumps({"format": ckpt.FORMAT, "model": Payload()}, protocol=proto))
    with pytest.raises(CheckpointError) as e:
        ckpt.read_checkpoint(bad)
    msg = str(e.value)
    assert "refusing: the file holds pickled code (`os.system`)" in msg and str(bad) in msg
    assert "weights_only" not in msg and not (tmp_path / "SHOULD_NOT_EXIST").exists()


def test_pickled_code_inside_a_torch_zip_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.save({"format": ckpt.FORMAT, "model": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match=r"pickled code \(`os\.system`\)"):
        ckpt.read_checkpoint(tmp_path / "evil.pt")
    assert not (tmp_path / "SHOULD_NOT_EXIST").exists()


@pytest.mark.parametrize("content, says", [
    (bytes(range(256)) * 4, "not a checkpoint (unrecognised binary content)"),
    (b'{"step": 1, "loss": 2.3}\n{"step": 2, "loss": 2.1}\n', "not a checkpoint (a text file"),
    (b"", "empty (0 bytes)"),
    (pickle.dumps([1, 2, 3]), "not a checkpoint (a pickle that is not a torch.save file"),
])
def test_not_a_checkpoint_says_so(tmp_path, content, says):
    p = tmp_path / "x.pt"
    p.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        ckpt.read_checkpoint(p)
    assert says in str(e.value) and "weights_only" not in str(e.value)
    assert "checkpoints/*.pt" in str(e.value)  # the fix


def test_a_torch_file_that_is_no_checkpoint_says_so(tmp_path):
    torch.save({"weights": torch.ones(2)}, tmp_path / "x.pt")
    with pytest.raises(CheckpointError, match="not a transformer-min checkpoint"):
        ckpt.read_checkpoint(tmp_path / "x.pt")


def test_truncated_checkpoint_is_named_as_such(tmp_path):
    data = _good(tmp_path / "a.pt").read_bytes()
    (tmp_path / "a.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or damaged"):
        ckpt.read_checkpoint(tmp_path / "a.pt")


@pytest.mark.parametrize("drop", ["model", "config", "step"])
def test_a_checkpoint_without_a_required_entry_is_named(tmp_path, drop):
    p = _good(tmp_path / "a.pt")
    state = torch.load(p, weights_only=True)
    del state[drop]
    torch.save(state, p)
    with pytest.raises(CheckpointError, match=f"has no '{drop}' entry"):
        ckpt.read_checkpoint(p)


def test_messages_are_cut_at_a_word_boundary():
    text = "word " * 100
    short = messages.shorten(text, 42)
    assert len(short) <= 42 and short.endswith(" ...") and short[:-4].split() == ["word"] * len(short[:-4].split())


def test_run_directory_skips_an_unreadable_newest_checkpoint_with_a_warning(tmp_path, caplog):
    d = tmp_path / "run" / "checkpoints"
    d.mkdir(parents=True)
    _good(d / "step_0000003.pt", 3)
    data = _good(d / "step_0000006.pt", 6).read_bytes()
    (d / "step_0000006.pt").write_bytes(data[:100])
    with caplog.at_level(logging.WARNING):
        state = ckpt.read_checkpoint(tmp_path / "run")
    assert state["step"] == 3
    assert "step_0000006.pt" in caplog.text and "previous checkpoint" in caplog.text
    (d / "step_0000003.pt").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="no earlier step checkpoint"):
        ckpt.read_checkpoint(tmp_path / "run")


def test_torchs_reason_is_kept_and_its_weights_only_advice_dropped(tmp_path):
    p = tmp_path / "g.pt"
    p.write_bytes(b"\x80\x02garbage")
    with pytest.raises(Exception) as e:
        torch.load(p, weights_only=True)
    assert "weights_only" in str(e.value)  # what torch says, advice included
    reason = messages.reason_without_advice(e.value)
    assert reason and "weights_only" not in reason and "False" not in reason


def test_a_real_checkpoints_globals_are_not_taken_for_code(tmp_path, make_config):
    """No false alarm: what tmin train writes (tensors, storages, OrderedDict) is not 'pickled code'."""
    import zipfile

    from transformer_min.cli.train import train

    _, run_dir = train(make_config(steps=1, checkpoint_interval=1))
    with zipfile.ZipFile(ckpt.latest_checkpoint(run_dir)) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    names = scan.pickled_globals(data)
    assert "torch._utils._rebuild_tensor_v2" in names and scan.code_globals(names) == []
