"""Property-based fuzzing of every input the loader and the parser take (issue 25), generated from the schema.

- config.toml documents: the known sections and keys of `core.keys` (aliases included) with values of any type,
  out of range, unknown sections and keys, a section given as a value and a value given as a table;
- settings.json documents: the runtime and channel keys, their aliases, unknown keys, and other JSON than an object;
- `--set` items: known and unknown SECTION.KEY with any value, and items of the wrong shape;
- the argument lists of every command of `cli.main`'s parser (its options, their choices and odd values), parsed,
  and run in-process for the commands that read a checkpoint (they fail before any work when it is missing).

No example may end in anything but a `TminError` (or argparse's exit 2), and a refusal names a key or argument.
Bounded by `max_examples` and derandomized, so CI runs the same examples every time in a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import string
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the dev extra (hypothesis) is not installed")
from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

from transformer_min.core.errors import TminError  # noqa: E402
from transformer_min.channel.schema import SECTION as CHANNEL, SECTIONS  # noqa: E402
from transformer_min.core.keys import ALIASES, RUNTIME_KEYS, SECTION_KEYS as CORE_KEYS, SETTINGS_SECTION  # noqa: E402
from transformer_min.core.project import load_project  # noqa: E402

SECTION_KEYS = {**CORE_KEYS, CHANNEL.name: list(CHANNEL.fields)}  # core's sections and the channel's
FUZZ = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
NAME = st.text(string.ascii_lowercase + "_", min_size=1, max_size=12)
SCALARS = st.one_of(
    st.integers(-2 ** 40, 2 ** 40), st.sampled_from([0, -1, 1, 3, 7, 10 ** 9, 2 ** 63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=16), st.sampled_from(["rope", "relative", "pre", "post", "cuda", "cpu", "auto", "", "NaN"]))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(NAME, SCALARS, max_size=2))


def toml_value(v) -> str:
    """A value as TOML text (json's string escapes are TOML's; nan and inf are TOML's own words)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"


def section_keys(section: str) -> list[str]:
    aliases = CHANNEL.aliases if section == CHANNEL.name else ALIASES.get(section, {})
    return SECTION_KEYS.get(section, []) + list(aliases)


@st.composite
def config_documents(draw) -> tuple[str, set[str]]:
    """(config.toml text, every section and key name it holds)."""
    sections = draw(st.lists(st.one_of(st.sampled_from(sorted(SECTION_KEYS)), NAME), min_size=1, max_size=3,
                             unique=True))
    lines, names = [], set(sections)
    top = draw(st.sampled_from([None, *sorted(SECTION_KEYS)]))  # a section given as a plain value
    if top is not None and top not in sections:
        lines.append(f"{top} = {toml_value(draw(SCALARS))}")
        names.add(top)
    for section in sections:
        lines.append(f"[{section}]")
        keys = draw(st.lists(st.one_of(st.sampled_from(section_keys(section) or ["x"]), NAME), max_size=4, unique=True))
        for key in keys:
            lines.append(f"{key} = {toml_value(draw(VALUES))}")
            names.add(key)
    return "\n".join(lines) + "\n", names


def schema_names(names: set[str]) -> set[str]:
    """The names a message may rightly name for a document: its own, and the keys of its sections (a check
    across keys names the other key)."""
    out = set(names)
    for n in names:
        out.update(section_keys(n))
    return out


def assert_refusal_names(e: TminError, names: set[str]) -> None:
    message = str(e)
    assert "\n" not in message.strip() or message.count("\n") < 12, message
    assert any(n in message for n in schema_names(names) | {"--set", "settings.json", "config.toml"}), message


@contextlib.contextmanager
def inside(tmp: Path):
    """cwd = tmp for the example (no ./config.toml or ./settings.json of the checkout is read), then back."""
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        yield
    finally:
        os.chdir(cwd)


def load(tmp: Path, **kw):
    with inside(tmp):
        return load_project(env={}, quiet=True, sections=SECTIONS, **kw)


@FUZZ
@given(doc=config_documents())
@example(doc=("[model]\nd_model = 1e400\n", {"model", "d_model"}))
@example(doc=("model = 3\n", {"model"}))
@example(doc=("[model]\nn_heads = 8\nnum_heads = 4\n", {"model", "n_heads", "num_heads"}))
def test_config_documents(doc, tmp_path_factory):
    text, names = doc
    tmp = tmp_path_factory.mktemp("cfg")
    (tmp / "config.toml").write_text(text, encoding="utf-8")
    try:
        load(tmp, config=tmp / "config.toml")
    except TminError as e:
        assert_refusal_names(e, names | {"config.toml"})


SETTINGS_KEYS = list(RUNTIME_KEYS) + list(CHANNEL.settings_names()) + ["device"]


@FUZZ
@given(doc=st.one_of(st.dictionaries(st.one_of(st.sampled_from(SETTINGS_KEYS), NAME), VALUES, max_size=4),
                     st.lists(SCALARS, max_size=2), SCALARS))
@example(doc={"api_base": "ftp://x", "base_url": "http://y"})
@example(doc={"num_threads": -3})
def test_settings_documents(doc, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("settings")
    p = tmp / "settings.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    names = set(doc) if isinstance(doc, dict) else set()
    try:
        load(tmp, settings=p)
    except TminError as e:
        assert_refusal_names(e, names | {str(p), "settings"})


ITEM_SECTIONS = sorted(SECTION_KEYS) + [SETTINGS_SECTION]


@st.composite
def set_items(draw) -> str:
    kind = draw(st.sampled_from(["known", "unknown", "shape"]))
    if kind == "shape":
        return draw(st.sampled_from(["model", "model.", ".d_model=1", "model.d_model", "model.d_model=", "=3",
                                     "a.b.c=1", "model..x=1"]) | st.text(max_size=12))
    section = draw(st.sampled_from(ITEM_SECTIONS) if kind == "known" else NAME)
    keys = list(RUNTIME_KEYS) if section == SETTINGS_SECTION else section_keys(section)
    key = draw(st.sampled_from(keys) if keys and kind == "known" else NAME)
    raw = draw(st.one_of(st.builds(toml_value, VALUES), st.text(string.printable, max_size=10)))
    return f"{section}.{key}={raw}"


@FUZZ
@given(items=st.lists(set_items(), min_size=1, max_size=3))
@example(items=["model.d_model=100"])
@example(items=["settings.num_threads=0"])
@example(items=["taotoken.api_key=sk-abcdefghijklmnop1234", "taotoken.timeout=x"])
def test_set_items(items, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sets")
    try:
        load(tmp, sets=items)
    except TminError as e:
        assert "--set" in str(e) or any(i.split("=")[0] in str(e) for i in items), str(e)
        assert "abcdefghijkl" not in str(e)  # a key given by --set is shown redacted


# ----------------------------------------------------------------------------- argument lists of every command
def subcommands() -> dict[str, argparse.ArgumentParser]:
    from transformer_min.cli.main import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = subcommands()
SKIP = {"-h", "--help", "--version"}


def options(command: str) -> list[argparse.Action]:
    return [a for a in COMMANDS[command]._actions if a.option_strings and not set(a.option_strings) & SKIP]


ODD = st.sampled_from(["", "-1", "0", "nan", "inf", "1e9", "x", "runs/none", "/dev/null", ".", "--", "é", "3.5"])


@st.composite
def argument_lists(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    argv = [command]
    for action in draw(st.lists(st.sampled_from(options(command)), max_size=4)) if options(command) else []:
        argv.append(draw(st.sampled_from(action.option_strings)))
        if action.nargs == 0:
            continue
        pool = [str(c) for c in action.choices] if action.choices else []
        argv.append(draw(st.sampled_from(pool) | ODD if pool else ODD | st.text(string.printable, max_size=8)))
    argv += draw(st.lists(ODD, max_size=1))  # a stray positional
    return argv


def parse(argv: list[str]):
    from transformer_min.cli.main import build_parser

    return build_parser().parse_args(argv)


@FUZZ
@given(argv=argument_lists())
@example(argv=["eval", "--beam", "0"])
@example(argv=["translate", "--compute-type", "int3", "x"])
@example(argv=["explore", "--port", "70000"])
def test_argument_lists_parse_or_exit_2(argv, capsys):
    try:
        parse(argv)
    except SystemExit as e:
        err = capsys.readouterr().err
        assert e.code == 2, (argv, e.code, err)
        assert "error:" in err and ("argument" in err or "--" in err or argv[0] in err), err


CHECKPOINT_COMMANDS = [c for c in ("translate", "decode", "eval", "export", "average") if c in COMMANDS]


@FUZZ
@given(argv=argument_lists().filter(lambda a: a[0] in CHECKPOINT_COMMANDS))
@example(argv=["eval", "--src", ".", "--ref", "."])
@example(argv=["translate", "--engine", "ctranslate2", "x"])
@example(argv=["average", "--log-level", "DEBUG", "--log-file", "-1"])  # found by hypothesis: the log is written
def test_checkpoint_commands_in_process(argv, tmp_path_factory, capsys):
    """Run in-process with a checkpoint that does not exist: every example ends in exit 2 or 3 with one line,
    never a traceback (a stray exception fails the test)."""
    from transformer_min.cli.main import main

    tmp = tmp_path_factory.mktemp("cmd")
    flags = {"translate": ["--checkpoint", "runs/none"], "decode": ["--checkpoint", "runs/none"],
             "eval": ["--checkpoint", "runs/none"], "export": ["--ctranslate2", "--checkpoint", "runs/none",
                                                               "--out", "out"], "average": ["runs/none"]}
    with inside(tmp):
        try:
            code = main([*argv, *flags[argv[0]]])
        except SystemExit as e:
            code = e.code
    err = capsys.readouterr().err
    assert code in (2, 3), (argv, code, err[-500:])
    assert "Traceback" not in err
    logs = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--log-file"}
    assert [p.name for p in tmp.iterdir() if p.name not in logs] == [], "nothing but the log when the checkpoint is missing"
