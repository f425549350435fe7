"""Bad inputs of issue 38, item 7, the rest of them: every refusal of a config value names the key and the source
it came from (the `--set` item, the config file by its path, the file TMIN_CONFIG names), with the fix. The
refusals made once the data, the task, the run folder or the device are known: the task's vocabulary, the
prepared vocabulary, data.max_len, a split with no text, data.vocab_size, data.data_dir, model.max_len against
the validation split, train.name, train.device, and training that runs out of memory (named by its largest field,
as the check before training names it); and a bad `--lang` refused even with `--help`.

Each case runs `tmin` in a fresh folder as a user would; `harness.check_case` holds the four rules (no traceback,
a non-zero exit, a message naming the key, the source and the fix, no existing file changed). `ABSENT` holds what
a message must not say: a source the value did not come from, or the old advice.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.bad_input.harness import Case, check_case
from tests.bad_input.test_file_inputs import MT_TOML
from tests.bad_input.test_sources_and_lock import TINY, files
from tests.data.conftest import make_pairs, write_split

# `tmin ARGS` with its address space capped at the first argument's MiB: the allocator's out-of-memory error
# is met in training (past the estimate before it, a lower bound) without using the machine's memory.
CAPPED = ("-c", "import resource, sys\nlimit = int(sys.argv.pop(1)) << 20\n"
                "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
                "from transformer_min.cli.main import main\nsys.exit(main())\n")


def mt_project(extra: dict | None = None, toml: str = MT_TOML):
    """mt.toml (a small translation config) and Multi30k-like splits under data/multi30k; then `extra` files."""

    def setup(tmp: Path) -> None:
        (tmp / "mt.toml").write_text(toml)
        data = tmp / "data" / "multi30k"
        write_split(data, "train", make_pairs(120, 1))
        write_split(data, "val", make_pairs(10, 2), gz=False)
        write_split(data, "test_2016_flickr", make_pairs(10, 3))
        files(extra or {})(tmp)

    return setup


def mt_with(old: str, new: str) -> str:
    assert old in MT_TOML, old
    return MT_TOML.replace(old, new)


TRAIN = ["train", "--config", "copy.toml"]
MT = ["train", "--config", "mt.toml"]
PREPARE = ["data", "prepare", "--config", "mt.toml"]
BLANK = {f"data/multi30k/tok/blank.lc.norm.tok.{lang}": " \n\t\n" for lang in ("de", "en")}
TASK = [
    Case("train-set-vocab-against-the-prepared-vocabulary",
         [*MT, "--set", "vocab.src_size=50", "--set", "vocab.tgt_size=50"],
         ["--set vocab.src_size=50, --set vocab.tgt_size=50: vocab.src_size/tgt_size = 50/50",
          "prepared vocabulary has", "fix: set both to"], mt_project()),
    Case("train-vocab-against-the-prepared-vocabulary-in-mt-toml", MT,
         ["mt.toml: vocab.src_size/tgt_size = 50/50", "fix: set both to"],
         mt_project(toml=mt_with("src_size = 60\ntgt_size = 60", "src_size = 50\ntgt_size = 50"))),
]
DATA = [
    Case("prepare-set-max-len-leaves-nothing", [*PREPARE, "--set", "data.max_len=1"],
         ["--set data.max_len=1: data.max_len = 1", "nothing to train on", "fix: raise data.max_len"], mt_project()),
    Case("prepare-max-len-in-the-file-tmin-config-names", ["data", "prepare"],
         ["mine.toml: data.max_len = 1", "fix: raise data.max_len"],
         mt_project({"mine.toml": mt_with("max_len = 40", "max_len = 1")}), env={"TMIN_CONFIG": "mine.toml"}),
    Case("prepare-set-split-with-no-text", [*PREPARE, "--set", "data.test_split=blank"],
         ["--set data.test_split=blank, mt.toml: data.test_split: split 'blank' has no text", "blank.lc.norm.tok.de",
          "fix: put its sentences"], mt_project(BLANK)),
    Case("prepare-set-vocab-size-below-the-characters", [*PREPARE, "--set", "data.vocab_size=16"],
         ["--set data.vocab_size=16: data.vocab_size = 16", "distinct characters", "fix: raise data.vocab_size"],
         mt_project()),
    Case("prepare-vocab-size-below-the-characters-in-mt-toml", PREPARE,
         ["mt.toml: data.vocab_size = 16", "fix: raise data.vocab_size"],
         mt_project(toml=mt_with("vocab_size = 60", "vocab_size = 16"))),
    Case("prepare-set-data-dir-without-files", [*PREPARE, "--set", "data.data_dir=nowhere"],
         ["--set data.data_dir=nowhere: data.data_dir = 'nowhere'", "no file for split", "fix: point data.data_dir"],
         mt_project()),
    Case("prepare-data-dir-in-mt-toml-without-files", PREPARE,
         ["mt.toml: data.data_dir = 'data/elsewhere'", "fix: point data.data_dir"],
         mt_project(toml=mt_with('data_dir = "data/multi30k"', 'data_dir = "data/elsewhere"'))),
    Case("train-set-data-dir-without-files", [*MT, "--set", "data.data_dir=data/none"],
         ["--set data.data_dir=data/none: data.data_dir = 'data/none'", "fix: point data.data_dir"], mt_project()),
    Case("train-set-model-max-len-below-every-val-sentence", [*MT, "--set", "model.max_len=3"],
         ["--set model.max_len=3: model.max_len = 3", "data.valid_split 'val'", "fix: raise model.max_len"],
         mt_project()),
]
RUN_DIR = [
    Case("train-set-name-leaves-out-dir", [*TRAIN, "--set", "train.name=../x"],
         ["--set train.name=../x: train.name", "leaves train.out_dir", "fix: use a plain name"],
         files({"copy.toml": TINY})),
    Case("train-name-in-copy-toml-leaves-out-dir", TRAIN,
         ["copy.toml: train.name", "'../escape'", "fix: use a plain name"],
         files({"copy.toml": TINY.replace('name = "copy"', 'name = "../escape"')})),
    Case("train-name-in-the-file-tmin-config-names-leaves-out-dir", ["train"],
         ["mine.toml: train.name", "'/tmp'", "fix: use a plain name"],
         files({"mine.toml": TINY.replace('name = "copy"', 'name = "/tmp"')}), env={"TMIN_CONFIG": "mine.toml"}),
    Case("train-set-name-is-a-file", [*TRAIN, "--set", "train.name=taken"],
         ["--set train.name=taken: train.name", "runs/taken exists and is not a folder", "fix: choose another --name"],
         files({"copy.toml": TINY, "runs/taken": "a file of the user's\n"})),
    Case("train-name-in-copy-toml-is-a-file", TRAIN,
         ["copy.toml: train.name", "runs/copy exists and is not a folder", "fix:"],
         files({"copy.toml": TINY, "runs/copy": "a file of the user's\n"})),
]
DEVICE = [
    Case("train-set-device-cuda-without-one", [*TRAIN, "--set", "train.device=cuda"],
         ["--set train.device=cuda: train.device = 'cuda'", "no CUDA device", "fix: set train.device = 'auto' or 'cpu'"],
         files({"copy.toml": TINY})),
    Case("train-device-cuda-in-copy-toml-without-one", TRAIN,
         ["copy.toml: train.device = 'cuda'", "fix: set train.device"],
         files({"copy.toml": TINY.replace('device = "cpu"', 'device = "cuda"')})),
]
MEMORY = [
    Case("train-out-of-memory-names-the-set-relative-clip",
         ["1500", *TRAIN, "--set", "model.positional=relative", "--set", "model.relative_clip=30000"],
         ["--set model.relative_clip=30000: model.relative_clip = 30,000", "training ran out of memory",
          "fix: lower model.relative_clip"], files({"copy.toml": TINY}), program=CAPPED),
]
LANG = [
    Case("lang-cn-before-the-command-with-help", ["--lang", "cn", "verify", "--help"],
         ["--lang: language 'cn'", "en, zh", "fix: --lang zh or --lang en"]),
    Case("lang-equals-fr-with-h", ["train", "-h", "--lang=fr"], ["--lang: language 'fr'", "fix: --lang zh"]),
    Case("lang-empty-with-help", ["verify", "--lang", "", "--help"], ["--lang: language ''", "fix: --lang zh"]),
    Case("lang-bad-with-help-in-the-locale-language", ["--lang", "cn", "verify", "--help"],
         ["--lang", "'cn'", "修正"], env={"LANG": "zh_CN.UTF-8"}),
]
ZH = [
    Case("train-set-vocab-against-the-prepared-vocabulary-zh",
         [*MT, "--set", "vocab.src_size=50", "--set", "vocab.tgt_size=50"],
         ["--set vocab.src_size=50, --set vocab.tgt_size=50", "vocab.src_size/tgt_size = 50/50", "修正"], mt_project(),
         env={"LANG": "zh_CN.UTF-8"}),
    Case("prepare-set-data-dir-without-files-zh", [*PREPARE, "--set", "data.data_dir=nowhere"],
         ["--set data.data_dir=nowhere", "data.data_dir = 'nowhere'", "修正"], mt_project(), env={"LANG": "zh_CN.UTF-8"}),
]
ALL = TASK + DATA + RUN_DIR + DEVICE + MEMORY + LANG + ZH
# what a message must never say: a source the value did not come from, or advice about another key
ABSENT = {
    "train-set-vocab-against-the-prepared-vocabulary": "mt.toml:",
    "prepare-set-max-len-leaves-nothing": "mt.toml:",
    "prepare-set-vocab-size-below-the-characters": "mt.toml:",
    "prepare-set-data-dir-without-files": "mt.toml:",
    "train-set-model-max-len-below-every-val-sentence": "mt.toml:",
    "train-set-name-leaves-out-dir": "copy.toml:",
    "train-set-device-cuda-without-one": "copy.toml:",
    "train-out-of-memory-names-the-set-relative-clip": "lower train.batch_tokens (",
}
NEEDS_NO_CUDA = {"train-set-device-cuda-without-one", "train-device-cuda-in-copy-toml-without-one"}


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_refusal_names_the_key_its_source_and_the_fix(case, tmp_path):
    if case.id in NEEDS_NO_CUDA and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: train.device = 'cuda' is not refused")
    proc = check_case(case, tmp_path)
    message = proc.stdout + proc.stderr
    print(f"{case.id}: {proc.stderr.strip()}")  # the message, for reading with pytest -rP
    assert case.id not in ABSENT or ABSENT[case.id] not in message, message
    if case.id in {c.id for c in LANG}:  # one line, and no help printed in the fallback language
        assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, message


def test_running_out_of_memory_in_training_names_the_largest_field_and_its_source(monkeypatch):
    """The allocator's error during trainer.fit() (a real one is the MEMORY case above) names what
    check_batch_memory would: the field furthest above its default, with the --set item that gave it."""
    from transformer_min.core.config import Config, ModelConfig, TrainConfig
    from transformer_min.core.errors import ConfigError
    from transformer_min.training.run import fit_within_memory

    def out_of_memory():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    trainer = SimpleNamespace(fit=out_of_memory)
    cfg = Config(model=ModelConfig(positional="relative", relative_clip=100000), train=TrainConfig(batch_tokens=200),
                 origins={"model.relative_clip": "--set model.relative_clip=100000", "train.batch_tokens": "c.toml"})
    with pytest.raises(ConfigError) as e:
        fit_within_memory(trainer, cfg, torch.device("cpu"))
    assert str(e.value).startswith("--set model.relative_clip=100000: model.relative_clip = 100,000: training ran out")
    assert "fix: lower model.relative_clip" in str(e.value)
    cfg = Config(train=TrainConfig(batch_tokens=50000), origins={"train.batch_tokens": "c.toml"})
    with pytest.raises(ConfigError, match=r"^c\.toml: train\.batch_tokens = 50,000: .*fix: lower train\.batch_tokens"):
        fit_within_memory(trainer, cfg, torch.device("cpu"))
    default = rf"^train\.batch_tokens = {TrainConfig().batch_tokens:,}: .*fix: lower train\.batch_tokens"
    with pytest.raises(ConfigError, match=default):
        fit_within_memory(trainer, Config(), torch.device("cpu"))  # nothing above its default: the batch is named


def test_a_task_with_more_ids_than_the_model_names_the_vocab_size_and_its_source():
    """train.task's own vocabulary against vocab.{src,tgt}_size (`check_task_vocab`): the copy and reverse tasks
    set their sizes and translation's are checked against the prepared vocabulary first, so a task of the
    library's caller meets it; the --set item or the file that gave the size is named."""
    from transformer_min.core.config import Config, VocabConfig
    from transformer_min.core.errors import ConfigError
    from transformer_min.training.task import check_task_vocab

    task = SimpleNamespace(src_vocab_size=11, tgt_vocab_size=12)
    cfg = Config(vocab=VocabConfig(src_size=11, tgt_size=11),
                 origins={"vocab.src_size": "c.toml", "vocab.tgt_size": "--set vocab.tgt_size=11"})
    with pytest.raises(ConfigError, match=r"^--set vocab\.tgt_size=11: vocab\.tgt_size = 11, but train\.task 'copy' "
                                          r"uses 12 ids; fix: set vocab\.tgt_size = 12$"):
        check_task_vocab(cfg, task)


def test_the_cases_are_named_once():
    assert len(ALL) >= 25 and len({c.id for c in ALL}) == len(ALL) and set(ABSENT) <= {c.id for c in ALL}
