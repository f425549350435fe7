"""An independent bad-input corpus (issue 13): inputs the other three files do not try.

Written as a second tester would: fresh values for every section of config.toml, settings.json and the
environment, every command's path options (folders for files, files for folders, empty strings, outputs
that would replace another file), checkpoints and run folders used where the other is expected, data files
(an empty .gz, a length limit that leaves nothing) and gateway replies from a server on 127.0.0.1 only.
Each case holds the four rules of `harness.check_case`: no traceback, a non-zero exit, a message naming
the thing and the fix, nothing that existed changed. Cases that failed before their fix say so.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case, run_tmin
from tests.bad_input.test_file_inputs import COPY_TOML, MT_TOML, project, workdir  # noqa: F401 - fixtures

KEY = "sk-test-0123456789abcdefWXYZ"
NO_PROXIES = {name: "" for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY") for name in (var, var.lower())}
OK = json.dumps({"choices": [{"message": {"role": "assistant", "content": "pong"}}]})


# ----------------------------------------------------------------------------- setups
def files(contents: dict):
    """Write each name -> text or bytes (None: a folder) under the case's folder."""

    def setup(tmp: Path) -> None:
        for name, content in contents.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                path.mkdir(exist_ok=True)
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")

    return setup


def verify_with(text: str | bytes, stage: str = "--list") -> dict:
    return {"args": ["verify", "--config", "c.toml", stage], "setup": files({"c.toml": text})}


def copy_toml_with(old: str, new: str) -> dict:
    assert old in COPY_TOML, old
    return {"c.toml": COPY_TOML.replace(old, new)}


def mt_toml_with(old: str, new: str) -> dict:
    assert old in MT_TOML, old
    return {"c.toml": MT_TOML.replace(old, new)}


def average_outside_the_run(tmp: Path) -> None:
    """An averaged checkpoint copied to the project root (no optimizer state, no run around it)."""
    proc = run_tmin(["average", "runs/copy", "--out", "avg.pt"], tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]


def empty_gz(tmp: Path) -> None:
    (tmp / "data/multi30k/tok/train.lc.norm.tok.de.gz").write_bytes(b"")


def settings(data, command=("verify", "--list")) -> dict:
    raw = data if isinstance(data, (str, bytes)) else json.dumps(data)
    return {"args": list(command), "setup": files({"settings.json": raw})}


def channel(**env) -> dict:
    return {"args": ["channel", "check"], "env": {**NO_PROXIES, "TAOTOKEN_API_KEY": KEY, **env}}


CKPT = "runs/copy/checkpoints/step_0000002.pt"

# ----------------------------------------------------------------------------- config.toml and the environment
CONFIG = [
    # train.out_dir = "" used to put the run in the current folder (found by the sweep, fixed after it)
    Case("out-dir-empty", expect=["train.out_dir", "is empty", 'out_dir = "runs"'],
         **verify_with('[train]\nout_dir = ""\n')),
    Case("array-where-an-integer-goes", expect=["model.d_model", "expected an integer", "[512]"],
         **verify_with("[model]\nd_model = [512]\n")),
    Case("inline-table-where-an-integer-goes", expect=["model.d_model", "expected an integer"],
         **verify_with("[model]\nd_model = {v = 512}\n")),
    Case("array-of-tables", expect=["c.toml", "model", "expected a table [model]"],
         **verify_with("[[model]]\nd_model = 64\n")),
    Case("num-layers-too-big-for-memory", expect=["model.num_layers = 100,000", "GB", "lower model.num_layers"],
         **verify_with("[model]\nnum_layers = 100000\n", "architecture")),
    Case("vocab-too-big-for-memory", expect=["vocab.src_size", "GB", "lower vocab.src_size"],
         **verify_with("[vocab]\nsrc_size = 10000000000\ntgt_size = 10000000000\n", "embeddings")),
    Case("verify-batch-too-big-for-memory", expect=["verify.batch_size = 100,000,000", "lower verify.batch_size"],
         **verify_with("[verify]\nbatch_size = 100000000\n", "attention")),
    Case("betas-one-number", expect=["train.betas", "expected a list of 2 numbers"],
         **verify_with("[train]\nbetas = [0.9]\n")),
    Case("ids-not-distinct", expect=["vocab", "pad_id, bos_id and eos_id must differ"],
         **verify_with("[vocab]\neos_id = 1\n")),
    # before: a top-level `source` was silently ignored (exit 0)
    Case("top-level-source-key", expect=["c.toml", "source: unknown section", "sections: attention"],
         **verify_with('source = "mine"\n')),
    # before: `--config ""` fell back to ./config.toml or the defaults (exit 0)
    Case("empty-config-flag", expect=["--config", "expected a path", "leave the option out"],
         args=["verify", "--config", "", "--list"]),
    # before: "line 1, column 129: not UTF-8 ...; fix: save it as UTF-8" for a checkpoint
    Case("checkpoint-as-config", expect=["step_0000002.pt", "a binary file", "not a config file",
                                         "path of the text file"],
         args=["verify", "--list"], env={"TMIN_CONFIG": CKPT}),
    # before: "'api_base': unknown key; did you mean 'warmup_steps'?"
    Case("settings-json-as-config", expect=["'api_base'", "settings.json key", "--settings"],
         args=["verify", "--list"], env={"TMIN_CONFIG": "s.json"},
         setup=files({"s.json": '{"api_base": "https://x.example"}'})),
    Case("tmin-config-is-a-folder", expect=["runs", "is a folder", "path of the file"], args=["verify", "--list"],
         env={"TMIN_CONFIG": "runs"}),
    # before: 100,000 threads crashed the process (SIGSEGV)
    Case("num-threads-huge", expect=["train.num_threads = 100,000", "threads per CPU", "at most"],
         args=["train", "--config", "c.toml", "--name", "nt"],
         setup=files(copy_toml_with('name = "copy"', 'name = "copy"\nnum_threads = 100000'))),
    # before: the allocator's RuntimeError as a traceback
    Case("batch-tokens-too-big-for-memory", expect=["train.batch_tokens = 100,000,000,000", "GB",
                                                    "lower train.batch_tokens"],
         args=["train", "--config", "c.toml", "--name", "bt"],
         setup=files(copy_toml_with("batch_tokens = 200", "batch_tokens = 100000000000"))),
    # before: "ValueError: Overflow when unpacking long long"
    Case("seed-too-big", expect=["train.seed", "must lie in [0, 4294967295]", "e.g. 1234"],
         args=["train", "--config", "copy.toml", "--name", "sd", "--seed", "99999999999999999999999"]),
    Case("seed-negative", expect=["train.seed", "-5", "in that range"],
         args=["train", "--config", "copy.toml", "--name", "sd", "--seed", "-5"]),
    # before: every training pair skipped with a warning, exit 0
    Case("data-max-len-leaves-nothing", expect=["data.max_len = 1", "nothing to train on", "raise data.max_len"],
         args=["data", "prepare", "--config", "c.toml"], setup=files(mt_toml_with("max_len = 40", "max_len = 1"))),
    # before: 100,000 whole batches per step (it ran for hours)
    Case("accum-steps-huge", expect=["train.accum_steps", "100,000 batches", "at most 1,024"],
         args=["train", "--config", "c.toml", "--name", "ac"],
         setup=files(copy_toml_with('name = "copy"', 'name = "copy"\naccum_steps = 100000'))),
    # before: the loss went NaN, "stopped at step 2 (diverged)" and exit 0
    Case("lr-factor-diverges", expect=["training diverged at step", "lower train.lr_factor", "train.clip"],
         args=["train", "--config", "c.toml", "--name", "lr"],
         setup=files(copy_toml_with("[train]", "[train]\nlr_factor = 1e30"))),
    # before: sentencepiece's RuntimeError "Vocabulary size is smaller than required_chars" (traceback)
    Case("data-vocab-size-below-the-characters", expect=["data.vocab_size = 16", "distinct characters",
                                                         "raise data.vocab_size to at least"],
         args=["data", "prepare", "--config", "c.toml"], setup=files(mt_toml_with("vocab_size = 60", "vocab_size = 16"))),
    Case("data-vocab-size-below-the-characters-unigram", expect=["data.vocab_size = 16", "at least"],
         args=["data", "prepare", "--config", "c.toml"],
         setup=files(mt_toml_with("vocab_size = 60", 'vocab_size = 16\ntokenizer = "unigram"'))),
    Case("data-src-lang-without-files", expect=["data.data_dir", "'fr'", "point data.data_dir"],
         args=["data", "prepare", "--config", "c.toml"],
         setup=files(mt_toml_with("[data]", '[data]\nsrc_lang = "fr"'))),
    Case("taotoken-timeout-zero", expect=["taotoken.timeout", "positive number of seconds", "timeout = 30"],
         setup=files({"config.toml": "[taotoken]\ntimeout = 0\n"}), **channel()),
]

# ----------------------------------------------------------------------------- settings.json and the channel's environment
SETTINGS = [
    # before: "line 1 column 1: invalid JSON (Expecting value); fix that line"
    Case("settings-empty-file", expect=["settings.json", "the file is empty", "write {}"], **settings("")),
    Case("settings-null", expect=["settings.json", "expected a JSON object"], **settings("null")),
    Case("settings-nested-object", expect=["settings.log_level", "expected a string"],
         **settings({"log_level": {"level": "INFO"}})),
    Case("settings-language-fr", expect=["settings.language", "'fr'", "'en', 'zh'"], **settings({"language": "fr"})),
    Case("settings-num-threads-string", expect=["settings.num_threads", "expected an integer"],
         **settings({"num_threads": "4"})),
    # before: "ValueError: Invalid IPv6 URL" (traceback)
    Case("env-base-url-broken-ipv6", expect=["TMIN_BASE_URL", "not a valid URL", "e.g. https://taotoken.net/api"],
         **channel(TMIN_BASE_URL="http://[::1")),
    # before: blamed on a refused connection
    Case("env-base-url-port-out-of-range", expect=["TMIN_BASE_URL", "99999", "not a valid URL"],
         **channel(TMIN_BASE_URL="http://127.0.0.1:99999")),
    # before: "UnicodeEncodeError: 'ascii' codec can't encode" (traceback)
    Case("env-key-not-ascii", expect=["TAOTOKEN_API_KEY", "not printable ASCII", "copy the key again"],
         args=["channel", "check"], env={**NO_PROXIES, "TAOTOKEN_API_KEY": "sk-ключ0123456789abcd",
                                         "TMIN_BASE_URL": "http://127.0.0.1:9"}),
    # before: "cannot connect ...: Illegal header value b'Bearer <the whole key>'" (the key shown in full)
    Case("env-key-with-a-line-break", expect=["TAOTOKEN_API_KEY", "line break at position 12", "copy the key again"],
         args=["channel", "check"], env={**NO_PROXIES, "TAOTOKEN_API_KEY": "sk-abcdefgh\nijklmnop1234",
                                         "TMIN_BASE_URL": "http://127.0.0.1:9"}),
    Case("env-model-blank", expect=["TMIN_MODEL", "model is empty", "remove the line"], **channel(TMIN_MODEL="   ")),
]

# ----------------------------------------------------------------------------- command-line paths and values
CLI = [
    # before: copy.toml was truncated and replaced by the log (exit 0)
    Case("log-file-over-a-config", expect=["--log-file copy.toml", "not a tmin log", "choose a new log path"],
         args=["--log-file", "copy.toml", "verify", "--list"]),
    # before: --task, --seed, --device ... were silently ignored on resume (exit 0, the run trained on)
    Case("resume-with-task-and-seed", expect=["--task, --seed with --resume", "keeps its own config", "drop"],
         args=["train", "--resume", "runs/copy", "--task", "reverse", "--seed", "3", "--steps", "3"]),
    # before: NotADirectoryError (traceback) after the claims ran
    Case("report-out-is-a-file", expect=["--out copy.toml", "is a file, not a folder", "pass a folder name"],
         args=["report", "--quick", "--stage", "attention", "--out", "copy.toml"]),
    # before: `--csv ""` was ignored (exit 0)
    Case("verify-csv-empty", expect=["--csv", "expected a path"], args=["verify", "attention", "--csv", ""]),
    Case("verify-csv-under-a-file", expect=["--csv copy.toml/sub", "cannot create the folder", "writable folder"],
         args=["verify", "attention", "--csv", "copy.toml/sub"]),
    # before: ".: no checkpoint found (expected ./checkpoints/step_*.pt)"
    Case("decode-checkpoint-empty", expect=["--checkpoint", "expected a path"],
         args=["decode", "--checkpoint", "", "3 4"]),
    # before: 50 s of decoding, then an empty line (exit 0)
    Case("decode-beam-wider-than-vocab", expect=["--beam 100000", "11 target symbols", "at most 11"],
         args=["decode", "--checkpoint", "runs/copy", "--beam", "100000", "3 4"]),
    # before: a --config that fails validation was ignored (the checkpoint's config is used), exit 0
    Case("translate-with-an-invalid-config", expect=["c.toml", "decode.beam_size", "positive integer"],
         args=["translate", "--checkpoint", "runs/mt", "--config", "c.toml", "ein hund ."],
         setup=files({"c.toml": "[decode]\nbeam_size = 0\n"})),
    Case("decode-with-an-invalid-config", expect=["c.toml", "model.dropout", "[0, 1)"],
         args=["decode", "--checkpoint", "runs/copy", "--config", "c.toml", "3 4"],
         setup=files({"c.toml": "[model]\ndropout = 2.0\n"})),
    Case("decode-tokens-not-integers", expect=["tokens", "space-separated integers", "'a b'"],
         args=["decode", "--checkpoint", "runs/copy", "a b"]),
    # before: "no checkpoint found (expected runs/copy/checkpoints/checkpoints/step_*.pt)"
    Case("decode-checkpoints-folder", expect=["runs/copy/checkpoints", "checkpoints folder of a run",
                                              "pass the run directory runs/copy"],
         args=["decode", "--checkpoint", "runs/copy/checkpoints", "3 4"]),
    # before: the step file was replaced by the average (exit 0)
    Case("average-out-over-a-step-file", expect=["--out " + CKPT, "not an earlier tmin average", "choose a new --out"],
         args=["average", "runs/copy", "--out", CKPT]),
    # before: copy.toml was replaced by a checkpoint (exit 0)
    Case("average-out-over-a-config", expect=["--out copy.toml", "not an earlier tmin average", "delete the file"],
         args=["average", "runs/copy", "--out", "copy.toml"]),
    # before: IsADirectoryError (traceback)
    Case("average-out-is-a-folder", expect=["--out runs", "is a folder", "runs/averaged.safetensors"],
         args=["average", "runs/copy", "--out", "runs"]),
    # before: "no step checkpoints to average"
    Case("average-a-checkpoint-file", expect=[CKPT, "is a checkpoint file", "tmin average runs/copy"],
         args=["average", CKPT]),
    # before: IsADirectoryError (traceback)
    Case("eval-hyp-out-is-a-folder", expect=["--hyp-out runs", "is a folder", "give a file path"],
         args=["eval", "--checkpoint", "runs/mt", "--config", "mt.toml", "--hyp-out", "runs"]),
    # before: metrics.jsonl replaced by hypotheses (exit 0)
    Case("eval-hyp-out-over-metrics", expect=["runs/mt/metrics.jsonl", "not written by tmin eval",
                                              "choose another --hyp-out"],
         args=["eval", "--checkpoint", "runs/mt", "--config", "mt.toml", "--hyp-out", "runs/mt/metrics.jsonl"]),
    # before: alpha nan accepted (exit 0)
    Case("eval-alpha-grid-nan", expect=["--alpha-grid", "finite alphas", "'nan,1'"],
         args=["eval", "--checkpoint", "runs/mt", "--config", "mt.toml", "--tune-alpha", "--alpha-grid", "nan,1"]),
    Case("eval-split-not-prepared", expect=["--split", "'nosuch'", "choose one of"],
         args=["eval", "--checkpoint", "runs/mt", "--config", "mt.toml", "--split", "nosuch"]),
    Case("eval-copy-task-checkpoint", expect=["runs/copy", "no spm.model", "runs/<name>/checkpoints"],
         args=["eval", "--checkpoint", "runs/copy", "--config", "mt.toml"]),
    # before: IsADirectoryError (traceback)
    Case("translate-attention-is-a-folder", expect=["runs", "is a folder", "give a file path"],
         args=["translate", "--checkpoint", "runs/mt", "--attention", "runs", "ein hund ."]),
    # before: the empty sentence was "translated" (exit 0)
    Case("translate-empty-argument", expect=["sentence 1 of the arguments is empty", "give the text"],
         args=["translate", "--checkpoint", "runs/mt", ""]),
    # before: no fix in the message
    Case("translate-overlong-sentence", expect=["sentence 1 has", "model.max_len 64", "split it"],
         args=["translate", "--checkpoint", "runs/mt", " ".join(["ein hund"] * 3000)]),
    # before: it ran for 1e9 seconds per probe (a hang)
    Case("doctor-probe-seconds-huge", expect=["--probe-seconds", "at most 60 seconds"],
         args=["doctor", "--probe-seconds", "1e9"], timeout=60),
    # before: accepted (exit 0)
    Case("doctor-probe-seconds-nan", expect=["--probe-seconds", "finite number"], args=["doctor", "--probe-seconds", "nan"]),
    Case("doctor-probe-seconds-negative", expect=["--probe-seconds", ">= 0"],
         args=["doctor", "--probe-seconds=-1"]),
]

# ----------------------------------------------------------------------------- checkpoints, run folders, data files
RUNS = [
    # before: step_0000002.pt and best.pt retrained over from step 1 (exit 0)
    Case("resume-an-older-step-file", expect=["step_0000001.pt", "later checkpoints (step_0000002.pt)",
                                              "--resume runs/copy"],
         args=["train", "--resume", "runs/copy/checkpoints/step_0000001.pt"]),
    # before: a finished run's newest step file and metrics were rewritten (exit 0)
    Case("resume-a-finished-run", expect=["--resume runs/copy", "already reached step 2", "larger --steps"],
         args=["train", "--resume", "runs/copy"]),
    Case("resume-a-finished-run-from-best", expect=["best.pt", "already reached step 2", "larger --steps"],
         args=["train", "--resume", "runs/copy/checkpoints/best.pt"]),
    # before: continued with a fresh optimizer and wrote config.toml, metrics and checkpoints into ./ (exit 0)
    Case("resume-an-average-outside-the-run", expect=["--resume avg.pt", "not in a run's checkpoints/ folder",
                                                      "--resume runs/<name>"],
         args=["train", "--resume", "avg.pt"], setup=average_outside_the_run),
    Case("resume-a-config-file", expect=["copy.toml", "not a checkpoint", "run directory"],
         args=["train", "--resume", "copy.toml"]),
    Case("resume-the-checkpoints-folder", expect=["runs/copy/checkpoints", "checkpoints folder of a run"],
         args=["train", "--resume", "runs/copy/checkpoints"]),
    Case("resume-the-data-cache-folder", expect=["runs/data", "no checkpoint found", "run directory"],
         args=["train", "--resume", "runs/data"]),
    Case("resume-a-translation-run-with-the-copy-config", expect=["--resume with a config that disagrees",
                                                                   "model.num_layers", "drop --config"],
         args=["train", "--resume", "runs/mt", "--config", "copy.toml"]),
    # before: "misaligned parallel files: ...de.gz has 0 lines"
    Case("data-empty-gz", expect=["train.lc.norm.tok.de.gz", "empty (0 bytes)", "download or copy it again"],
         args=["data", "prepare", "--config", "mt.toml", "--force"], setup=empty_gz),
    Case("data-target-file-missing", expect=["data.data_dir", "'val' language 'en'", "point data.data_dir"],
         args=["data", "prepare", "--config", "mt.toml", "--force"],
         setup=lambda tmp: (tmp / "data/multi30k/tok/val.lc.norm.tok.en").unlink()),
]

LOCAL = CONFIG + SETTINGS + CLI + RUNS


@pytest.mark.parametrize("case", LOCAL, ids=[c.id for c in LOCAL])
def test_independent_bad_input(case, workdir):  # noqa: F811 - the fixture imported above
    proc = check_case(case, workdir)
    output = proc.stdout + proc.stderr
    assert KEY not in output and "ijklmnop1234" not in output  # never a key in full
    assert not (workdir / "checkpoints").exists() and not (workdir / "metrics.jsonl").exists()  # no run in ./


# ----------------------------------------------------------------------------- gateway replies (127.0.0.1 only)
def _reply(status: int, headers: dict, body: str | bytes) -> bytes:
    data = body if isinstance(body, bytes) else body.encode("utf-8")
    fields = {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers, "Connection": "close"}
    head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return (head + "\r\n").encode("ascii") + data


REPLIES = {
    "content-is-a-number": _reply(200, {}, json.dumps({"choices": [{"message": {"content": 5}}]})),
    "anthropic-content-is-a-string": _reply(200, {}, json.dumps({"content": "hello"})),
    "choices-empty": _reply(200, {}, json.dumps({"choices": []})),
    "not-really-gzip": _reply(200, {"Content-Encoding": "gzip"}, OK),
    "body-cut-short": _reply(200, {"Content-Length": "5000"}, OK),
    "not-http": b"HELLO THERE\r\n\r\n",
    "models-data-is-a-string": _reply(200, {}, json.dumps({"data": "gpt"})),
}


class Gateway(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.close_connection = True
        scenario = self.path.strip("/").split("/")[0]
        try:
            if scenario == "endless":  # a chunked body that never ends
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    self.wfile.write(b"400\r\n" + b" " * 1024 + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.01)
            else:
                self.wfile.write(REPLIES.get(scenario, _reply(404, {}, "no such scenario")))
        except OSError:  # the client gave up
            pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def do_GET(self) -> None:  # noqa: N802
        self._answer()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def gateway_url():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def reply_case(scenario: str, expect: list[str], command=("channel", "check"), protocol: str = "openai",
               timeout: float = 5) -> Case:
    case = Case(id=f"gateway-{scenario}", args=list(command), expect=expect, env={**NO_PROXIES, "TAOTOKEN_API_KEY": KEY})
    case.setup_fields = {"scenario": scenario, "protocol": protocol, "timeout": timeout}  # type: ignore[attr-defined]
    return case


GATEWAY = [
    # before: AttributeError: 'int' object has no attribute 'strip' (traceback)
    reply_case("content-is-a-number", ["is not openai JSON", "check that base_url"]),
    # before: "result OK ... reply (empty reply)" (exit 0)
    reply_case("anthropic-content-is-a-string", ["is not anthropic JSON", "protocol matches"], protocol="anthropic"),
    reply_case("choices-empty", ["no 'choices'", "check that base_url"]),
    # before: "cannot connect to 127.0.0.1:...: Error -3 while decompressing" with a proxy note
    reply_case("not-really-gzip", ["answered with a broken reply", "decompressing", "try again later"]),
    # before: "cannot connect ...: peer closed connection without sending complete message body"
    reply_case("body-cut-short", ["answered with a broken reply", "complete message body", "base_url"]),
    reply_case("not-http", ["answered with a broken reply", "illegal status line", "api root"]),
    reply_case("models-data-is-a-string", ["not a model list", "check that base_url"], command=("channel", "models")),
    reply_case("endless", ["within timeout = 2 s", "raise timeout"], timeout=2),
]


@pytest.mark.parametrize("case", GATEWAY, ids=[c.id for c in GATEWAY])
def test_independent_gateway_reply(case, tmp_path, gateway_url):
    f = case.setup_fields  # type: ignore[attr-defined]
    (tmp_path / "settings.json").write_text(json.dumps({
        "api_base": f"{gateway_url}/{f['scenario']}", "model": "m", "timeout": f["timeout"],
        "protocol": f["protocol"]}), encoding="utf-8")
    start = time.monotonic()
    proc = check_case(case, tmp_path)
    assert KEY not in proc.stdout + proc.stderr
    assert time.monotonic() - start < 30  # nothing hangs


# ----------------------------------------------------------------------------- accepted inputs that used to hurt
def test_a_utf8_bom_is_read_in_config_settings_and_data(workdir):
    """Windows editors write a byte-order mark: before, config.toml said 'Invalid statement (at line 1,
    column 1)', settings.json 'Unexpected UTF-8 BOM', and a data file kept U+FEFF in sentence 1."""
    from transformer_min.data.text import read_lines

    (workdir / "c.toml").write_text("\ufeff[model]\nd_model = 64\nnum_heads = 4\n", encoding="utf-8")
    (workdir / "settings.json").write_text('\ufeff{"log_level": "INFO"}', encoding="utf-8")
    proc = run_tmin(["verify", "--config", "c.toml", "--list"], workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    val = workdir / "data/multi30k/tok/val.lc.norm.tok.de"
    first = val.read_text(encoding="utf-8").split("\n")[0]
    val.write_bytes(b"\xef\xbb\xbf" + val.read_bytes())
    assert read_lines(val)[0] == first


def test_an_unreachable_vocabulary_size_is_named_in_a_warning(workdir):
    (workdir / "c.toml").write_text(MT_TOML.replace("vocab_size = 60", "vocab_size = 50000"))
    proc = run_tmin(["data", "prepare", "--config", "c.toml"], workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "data.vocab_size = 50000: the 'train' text yields only" in proc.stderr


def test_an_unwritable_log_file_is_one_warning_not_a_logging_error(tmp_path):
    """/dev/full: before, logging printed '--- Logging error ---' and a trace for every record."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    proc = run_tmin(["--log-file", "/dev/full", "verify", "--list"], tmp_path)
    assert proc.returncode == 0 and "Logging error" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("cannot write the log file /dev/full") == 1


def test_a_log_file_replaces_an_earlier_log(tmp_path):
    for _ in range(2):
        proc = run_tmin(["--log-file", "tmin.log", "verify", "--list"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "tmin.log").read_text().startswith("WARNING transformer_min.core.config: ")


def test_average_may_replace_its_own_earlier_output(workdir):
    """The --out guard refuses other files, not a re-run of the same average."""
    for _ in range(2):
        proc = run_tmin(["average", "runs/copy", "--out", "runs/copy/checkpoints/avg.pt"], workdir)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_resume_still_continues_a_run_with_more_steps(workdir):
    proc = run_tmin(["train", "--resume", "runs/copy", "--steps", "3"], workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumed" in proc.stderr and (workdir / "runs/copy/checkpoints/step_0000003.pt").exists()


def test_enough_cases():
    ids = [c.id for c in LOCAL + GATEWAY]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
