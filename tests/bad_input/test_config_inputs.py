"""Bad inputs (issue 13): config.toml, settings.json, the environment and command-line arguments.

Each case runs `tmin` in a fresh folder as a user would and holds the answer to the four rules of
`harness.check_case`: no traceback, a non-zero exit, a message naming the thing and the fix, and no
existing file changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .harness import Case, check_case


def files(contents: dict[str, str | bytes | None]):
    """A setup that writes each file name -> text or bytes (None: make a folder of that name)."""

    def setup(tmp: Path) -> None:
        for name, content in contents.items():
            path = tmp / name
            if content is None:
                path.mkdir()
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")

    return setup


def verify_with(text: str | bytes, name: str = "c.toml") -> dict:
    """Case fields for `tmin verify --config <file>` holding `text`."""
    return {"args": ["verify", "--config", name], "setup": files({name: text})}


def settings(data) -> dict:
    """Case fields for a command that reads ./settings.json holding `data` (a dict, or raw text/bytes)."""
    raw = data if isinstance(data, (str, bytes)) else json.dumps(data)
    return {"args": ["verify", "--list"], "setup": files({"settings.json": raw})}


CONFIG_CASES = [
    # config.toml, as `tmin verify --config` reads it
    Case("unknown-key", expect=["model.d_modle", "did you mean 'd_model'"], **verify_with("[model]\nd_modle = 512\n")),
    Case("misplaced-key", expect=["model.warmup_steps", "belongs in [train]"],
         **verify_with("[model]\nwarmup_steps = 4000\n")),
    Case("every-unknown-key-at-once", expect=["3 unknown keys", "model.d_modle", "train.stpes", "model.beam_size",
                                              "belongs in [decode]"],
         **verify_with("[model]\nd_modle = 1\nbeam_size = 4\n[train]\nstpes = 3\n")),
    Case("key-outside-any-table", expect=["d_model", "belongs in [model]"], **verify_with("d_model = 64\n")),
    Case("unknown-section", expect=["modle", "did you mean 'model'"], **verify_with("[modle]\nd_model = 64\n")),
    Case("heads-do-not-divide", expect=["model.num_heads", "7 does not divide", "choose num_heads from"],
         **verify_with("[model]\nnum_heads = 7\n")),
    Case("attention-heads-do-not-divide", expect=["attention.num_heads", "choose num_heads from"],
         **verify_with("[attention]\nd_model = 64\nn_heads = 5\n")),
    Case("alias-and-canonical", expect=["attention.n_heads", "keep only num_heads"],
         **verify_with("[attention]\nn_heads = 4\nnum_heads = 8\n")),
    Case("model-d_k-not-per-head", expect=["model.d_k", "free_head_dims = true"], **verify_with("[model]\nd_k = 32\n")),
    Case("string-for-integer", expect=["model.d_model", "expected an integer"],
         **verify_with('[model]\nd_model = "512"\n')),
    Case("dropout-out-of-range", expect=["model.dropout", "[0, 1)"], **verify_with("[model]\ndropout = 1.5\n")),
    Case("nan-number", expect=["train.lr_factor", "finite number"], **verify_with("[train]\nlr_factor = nan\n")),
    Case("inf-number", expect=["decode.length_penalty", "finite number"],
         **verify_with("[decode]\nlength_penalty = inf\n")),
    Case("literal-not-a-choice", expect=["model.positional", "'sinusoidal'"],
         **verify_with('[model]\npositional = "alibi"\n')),
    Case("loss-kernel-not-a-choice", expect=["train.loss_kernel", "'fused'", "'paper'"],
         **verify_with('[train]\nloss_kernel = "fast"\n')),
    Case("relative-clip-not-positive", expect=["model.relative_clip", "positive integer"],
         **verify_with('[model]\npositional = "relative"\nrelative_clip = 0\n')),
    Case("rope-odd-head-size", expect=["model.positional", "d_k must be even", "even d_model / num_heads"],
         **verify_with('[model]\npositional = "rope"\nd_model = 520\n')),
    Case("relative-clip-too-big-for-memory", expect=["model.relative_clip = 1,000,000,000", "GB",
                                                     "lower model.relative_clip"],
         **verify_with('[model]\npositional = "relative"\nrelative_clip = 1000000000\n')),
    Case("tying-needs-shared-vocab", expect=["model.weight_tying", "set equal sizes"],
         **verify_with("[vocab]\nsrc_size = 100\ntgt_size = 120\n")),
    Case("toml-syntax", expect=["c.toml", "line 2", "fix that line"], **verify_with("[model]\nd_model = = 5\n")),
    Case("toml-not-utf8", expect=["c.toml line 2", "not UTF-8", "save it as UTF-8"],
         **verify_with(b"[model]\n# caf\xe9\n")),
    Case("config-is-a-folder", expect=["c.toml", "is a folder", "path of the file"],
         args=["verify", "--config", "c.toml"], setup=files({"c.toml": None})),
    Case("config-missing", expect=["nope.toml", "not found", "check the path"],
         args=["verify", "--config", "nope.toml"]),
    Case("d_model-too-big-for-memory", expect=["c.toml: model.d_model = 1,000,000,000", "GB", "lower model.d_model"],
         **verify_with("[model]\nd_model = 1000000000\n")),
    Case("max_len-too-big-for-memory", expect=["model.max_len = 1,000,000,000", "GB", "lower model.max_len"],
         **verify_with("[model]\nmax_len = 1000000000\n")),
    Case("verify-seq-len-too-big-for-memory", expect=["verify.seq_len = 1,000,000,000", "GB", "lower verify.seq_len"],
         **verify_with("[verify]\nseq_len = 1000000000\n")),
    Case("attention-demo-too-big-for-memory", expect=["attention.d_model", "GB", "lower attention.d_model"],
         **verify_with("[attention]\nd_model = 1000000000\n")),
    Case("flat-json-unknown-key", expect=["'d_modle'", "did you mean 'd_model'"],
         **verify_with(json.dumps({"d_modle": 512, "num_heads": 8}), "hparams.json")),
    Case("flat-json-syntax", expect=["hparams.json line 1", "fix that line"],
         **verify_with('{"d_model": 512,, }', "hparams.json")),
    Case("json-not-an-object", expect=["hparams.json", "expected a JSON object"],
         **verify_with("[512, 8]", "hparams.json")),
    Case("tmin-config-env-missing", expect=["gone.toml", "not found", "TMIN_CONFIG"], args=["verify"],
         env={"TMIN_CONFIG": "gone.toml"}),
    # config.toml under `tmin channel check` (the channel reads [taotoken] itself)
    Case("channel-config-not-utf8", expect=["config.toml line 1", "not UTF-8", "save it as UTF-8"],
         args=["channel", "check"], setup=files({"config.toml": b"\xff[taotoken]\n"}),
         env={"TAOTOKEN_API_KEY": "sk-test-0123456789abcdefWXYZ"}),
    Case("channel-config-toml-syntax", expect=["config.toml", "invalid TOML", "fix that line"],
         args=["channel", "check"], setup=files({"config.toml": "[taotoken]\nmodel = \n"})),
    Case("channel-unknown-taotoken-key", expect=["base_ulr", "did you mean 'base_url'"], args=["channel", "check"],
         setup=files({"config.toml": '[taotoken]\nbase_ulr = "https://x.example"\n'})),
    Case("local-config-with-model-table", expect=["config.local.toml", "only [taotoken]", "move it"],
         args=["channel", "check"], setup=files({"config.local.toml": "[model]\nd_model = 64\n"}),
         env={"TAOTOKEN_API_KEY": "sk-test-0123456789abcdefWXYZ"}),
    # settings.json, read before any command runs
    Case("settings-typo-of-a-channel-key", expect=["unknown key 'api_bse'", "did you mean 'api_base'"],
         **settings({"api_bse": "https://x.example", "log_level": "INFO"})),
    Case("settings-every-unknown-key", expect=["2 unknown keys", "'modle'", "did you mean 'model'", "'colour'"],
         **settings({"modle": "x", "colour": "blue"})),
    Case("settings-config-key", expect=["'d_model'", "belongs in config.toml [model]"], **settings({"d_model": 64})),
    Case("settings-not-utf8", expect=["settings.json line 2", "not UTF-8", "save it as UTF-8"],
         **settings(b'{\n"log_level": "INFO\xff"\n}\n')),
    Case("settings-is-a-folder", expect=["settings.json", "is a folder", "path of the file"], args=["verify", "--list"],
         setup=files({"settings.json": None})),
    Case("settings-json-syntax", expect=["settings.json line 3", "fix that line"],
         **settings('{\n  "log_level": "INFO",\n  "device": cpu\n}\n')),
    Case("settings-not-an-object", expect=["settings.json", "expected a JSON object", "settings.example.json"],
         **settings('["INFO"]')),
    Case("settings-bad-log-level", expect=["settings.log_level", "'LOUD'", "DEBUG, INFO"],
         **settings({"log_level": "LOUD"})),
    Case("settings-device-removed", expect=["settings.device", "'tpu'", "[train] device", "--set train.device=cuda"],
         **settings({"device": "tpu"})),
    Case("num-threads-in-both-files", expect=["num_threads is set twice", "c.toml train.num_threads = 2",
                                              "keep it in settings.json only"],
         args=["verify", "--list", "--config", "c.toml"],
         setup=files({"c.toml": "[train]\nnum_threads = 2\n", "settings.json": '{"num_threads": 4}'})),
    Case("settings-timeout-as-string", expect=["timeout", "'30'", "e.g. timeout = 30"], **settings({"timeout": "30"})),
    Case("settings-base-url-and-api-base", expect=["'base_url'", "keep only 'api_base'"],
         **settings({"base_url": "https://a.example", "api_base": "https://b.example"})),
    Case("settings-api-base-not-a-url", expect=["api_base", "not an http(s) URL", "e.g. https://taotoken.net/api"],
         **settings({"api_base": "taotoken.net/api"})),
    Case("settings-explicit-missing", expect=["other.json", "not found", "check the path"],
         args=["--settings", "other.json", "verify", "--list"]),
    # --set section.key=value (issue 14): validated like the file, naming the item
    Case("set-no-equals", expect=["--set 'attention.num_heads'", "SECTION.KEY=VALUE", "--set attention.num_heads=4"],
         args=["verify", "--list", "--set", "attention.num_heads"]),
    Case("set-no-value", expect=["--set 'model.norm='", "no value after '='"],
         args=["verify", "--list", "--set", "model.norm="]),
    Case("set-unknown-section", expect=["modle: unknown section", "--set modle.d_model=64", "did you mean 'model'"],
         args=["verify", "--list", "--set", "modle.d_model=64"]),
    Case("set-unknown-key", expect=["model.num_head: unknown key", "--set model.num_head=4", "did you mean 'num_heads'"],
         args=["verify", "--list", "--set", "model.num_head=4"]),
    Case("set-misplaced-key", expect=["model.warmup_steps", "belongs in [train]"],
         args=["report", "--set", "model.warmup_steps=10"]),
    Case("set-wrong-type", expect=["--set model.d_model=big", "model.d_model", "expected an integer"],
         args=["verify", "--list", "--set", "model.d_model=big"]),
    Case("set-out-of-range", expect=["--set model.dropout=1.5", "model.dropout", "[0, 1)"],
         args=["data", "prepare", "--set", "model.dropout=1.5"]),
    Case("set-settings-key", expect=["--set settings.log_level=LOUD", "'LOUD'", "DEBUG, INFO"],
         args=["verify", "--list", "--set", "settings.log_level=LOUD"]),
    Case("set-taotoken-protocol", expect=["--set taotoken.protocol=soap", "'soap'", 'protocol = "openai"'],
         args=["channel", "check", "--set", "taotoken.protocol=soap"]),
    Case("set-config-key-on-average", expect=["--set decode.*", "tmin average", "drop it"],
         args=["average", "runs/x", "--set", "decode.beam_size=8"]),
    # the environment
    Case("env-log-level", expect=["TMIN_LOG_LEVEL", "'bogus'", "unset it"], args=["verify", "--list"],
         env={"TMIN_LOG_LEVEL": "bogus"}),
    Case("env-protocol", expect=["TMIN_PROTOCOL", "'soap'", 'protocol = "openai"'], args=["channel", "check"],
         env={"TMIN_PROTOCOL": "soap", "TAOTOKEN_API_KEY": "sk-test-0123456789abcdefWXYZ"}),
    Case("env-base-url", expect=["TMIN_BASE_URL", "not an http(s) URL", "e.g. https://taotoken.net/api"],
         args=["channel", "check"], env={"TMIN_BASE_URL": "ftp://x.example", "TAOTOKEN_API_KEY": "sk-t-1234567890"}),
    Case("env-placeholder-key", expect=["TAOTOKEN_API_KEY", "placeholder", "replace it with your real key"],
         args=["channel", "check"], env={"TAOTOKEN_API_KEY": "YOUR_TAOTOKEN_API_KEY"}),
    # command-line arguments
    Case("decode-beam-0", expect=["--beam", "positive integer", "'0'"],
         args=["decode", "--checkpoint", "run", "--beam", "0", "3 4"]),
    Case("decode-beam-negative", expect=["--beam", "positive integer", "'-1'"],
         args=["decode", "--checkpoint", "run", "--beam=-1", "3 4"]),
    Case("decode-alpha-nan", expect=["--alpha", "finite number", "'nan'"],
         args=["decode", "--checkpoint", "run", "--alpha", "nan", "3 4"]),
    Case("train-time-budget-nan", expect=["--time-budget", "finite number", "'nan'"],
         args=["train", "--task", "copy", "--time-budget", "nan"]),
    Case("train-steps-0", expect=["--steps", "positive integer"], args=["train", "--task", "copy", "--steps", "0"]),
    Case("eval-alpha-step-inf", expect=["--alpha-step", "finite number"],
         args=["eval", "--checkpoint", "run", "--alpha-step", "inf"]),
    Case("average-last-0", expect=["--last", "positive integer"], args=["average", "runs/x", "--last", "0"]),
    Case("log-file-missing-folder", expect=["--log-file", "logs/deep", "does not exist", "mkdir -p"],
         args=["--log-file", "logs/deep/tmin.log", "verify", "--list"]),
    Case("log-file-is-a-folder", expect=["--log-file", "is a folder", "give a file path"],
         args=["--log-file", "out", "verify", "--list"], setup=files({"out": None})),
    Case("log-file-kept-on-bad-settings", expect=["settings.log_level", "'LOUD'"],
         args=["--log-file", "old.log", "verify", "--list"],
         setup=files({"old.log": "yesterday's log\n", "settings.json": '{"log_level": "LOUD"}'})),
    Case("log-level-unknown", expect=["--log-level", "'LOUD'", "choose from"], args=["--log-level", "LOUD", "verify"]),
    Case("verify-unknown-stage", expect=["'atention'", "did you mean 'attention'"], args=["verify", "atention"]),
]


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c.id for c in CONFIG_CASES])
def test_bad_config_input(case, tmp_path):
    proc = check_case(case, tmp_path)
    assert "sk-test-0123456789abcdefWXYZ" not in proc.stdout + proc.stderr  # never a key in full


def test_every_case_id_is_unique():
    ids = [c.id for c in CONFIG_CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 45
