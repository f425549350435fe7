"""The config reference, the READMEs and the task pages of docs/ stay in step with the code: every command they
quote parses, every script and make target they name exists, every link resolves, and the README stays a
five-minute read."""

import dataclasses
from pathlib import Path

import pytest

from transformer_min.core import config

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [config.ModelConfig, config.VocabConfig, config.VerifyConfig, config.AttentionDemoConfig,
            config.TrainConfig, config.DataConfig, config.DecodeConfig, config.RuntimeSettings]


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_every_config_key_is_documented(cls):
    doc = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    missing = [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in doc]
    assert not missing, f"docs/config.md lacks {cls.__name__} keys {missing}"


def test_readme_names_the_ci_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci and "make test" in readme and "make demo" in readme


def test_settings_example_has_only_placeholders():
    import json

    example = json.loads((ROOT / "settings.example.json").read_text(encoding="utf-8"))
    assert example["api_key"] == "YOUR_TAOTOKEN_API_KEY"
    assert example["api_base"] == "https://taotoken.net/api"


def _multi30k_section() -> str:
    """Every `## ...` section of docs/results.md that names Multi30k, joined."""
    import re

    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    sections = re.split(r"(?m)^(?=## )", text)
    return "\n".join(sec for sec in sections if sec.startswith("## ") and "Multi30k" in sec.splitlines()[0])


def test_every_multi30k_bleu_table_row_states_its_update_count():
    """Issue 12: minutes buy different updates on each machine, so every BLEU row says how many."""
    import re

    rows = 0
    for table in re.findall(r"(?:^\|.*\|\n)+", _multi30k_section(), flags=re.M):
        lines = table.strip().splitlines()
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        if not any("BLEU" in c or c in ("last", "best (val)") for c in header) or header[0] == "updates":
            if header[0] == "updates":  # a validation curve: its first column is the update count
                rows += len(lines) - 2
            continue
        assert "updates" in header, f"a Multi30k BLEU table without an updates column: {lines[0]}"
        col = header.index("updates")
        for line in lines[2:]:
            cell = line.strip("|").split("|")[col].strip()
            assert re.fullmatch(r"\d[\d,]*", cell), f"no update count in: {line}"
            rows += 1
    assert rows >= 5


def test_multi30k_prose_figures_state_their_update_count():
    """Each paragraph or bullet of the Multi30k section that gives a BLEU-sized figure with a minute
    budget also names the updates."""
    import re

    for block in re.split(r"\n\s*\n|\n- ", _multi30k_section()):
        if block.lstrip().startswith("|") or "```" in block:
            continue
        if re.search(r"\b\d\d\.\d\d\b", block) and re.search(r"\b\d+ min(ute)?s?\b", block):
            assert "updates" in block or "steps" in block, f"figures without an update count:\n{block}"


ZH_DOCS = [ROOT / "README.zh-CN.md", ROOT / "docs" / "zh" / "posts.md"]


def test_chinese_readme_has_the_two_commands_and_links_that_resolve():
    import re

    text = ZH_DOCS[0].read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / link).exists(), link


def test_posts_page_maps_every_post_with_its_labels():
    text = ZH_DOCS[1].read_text(encoding="utf-8")
    for title in ("用 TaoToken 统一 Key 跑通多头注意力最小验证", "从论文公式到能跑的代码中间差了什么",
                  "从论文到可运行代码为什么需要统一 Key 通道", "Transformer 自注意力机制到底怎么落地"):
        assert title in text
    for label in ("输入形状", "注意力权重形状", "每行权重和"):
        assert label in text


@pytest.mark.parametrize("path", ZH_DOCS, ids=lambda p: p.name)
def test_every_tmin_command_in_the_chinese_docs_parses(path):
    """Each `tmin ...` command quoted in the Chinese docs is accepted by the parser, with known stage names."""
    commands = _code_commands(path) + _inline_commands(path)
    assert len(commands) >= 5
    _parse_all(commands)


# Issue 38: the README is what this is, the two commands, what `tmin verify` prints and where to go next; its
# other sections moved into these pages, each with its commands.
READMES = [ROOT / "README.md", ROOT / "README.zh-CN.md"]
TASK_PAGES = ["verify", "training", "translation", "export_ct2", "report", "table3", "explorer", "channel",
              "performance", "config", "troubleshooting", "architecture", "deviations", "results", "security"]
ZH_PAGES = ["posts", "training", "troubleshooting"]
# The pages that hold the README's commands. results.md names commands in prose with some of their arguments
# (`tmin average --last 5`); the link and script tests check it.
COMMAND_PAGES = ["README.md", "README.zh-CN.md"] + [f"docs/{p}.md" for p in TASK_PAGES if p not in
                 ("architecture", "deviations", "security", "results")] + [f"docs/zh/{p}.md" for p in ZH_PAGES]


def _pages() -> list[Path]:
    """README.md, README.zh-CN.md and every page of docs/ and docs/zh/ (the ones others add too)."""
    return READMES + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "zh").glob("*.md"))


@pytest.mark.parametrize("path", READMES, ids=lambda p: p.name)
def test_the_readme_is_a_five_minute_read(path):
    """200 lines is the bar; the rest lives in docs/."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"{path.name} has {len(lines)} lines; move sections into docs/ pages"


@pytest.mark.parametrize("path", READMES, ids=lambda p: p.name)
def test_the_readme_keeps_the_facts_of_the_two_commands(path):
    """The torch pin (the one constraints.txt and the Makefile hold), the CPU-only index, the test processes,
    doctor."""
    import re

    text = path.read_text(encoding="utf-8")
    pin = re.search(r"(?m)^torch==\S+", (ROOT / "constraints.txt").read_text(encoding="utf-8")).group(0)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert pin in makefile and f"`{pin}`" in text and "`constraints.txt`" in text
    for fact in ("make demo", "make test", "TORCH_INDEX_URL", "make test TEST_WORKERS=0", "TEST_WORKERS=4",
                 "tmin doctor", "tmin doctor --json", "tmin verify", "-c constraints.txt"):
        assert fact in text, (path.name, fact)
    for variable in ("TORCH_INDEX_URL", "TEST_WORKERS"):
        assert re.search(rf"(?m)^{variable} \?=", makefile), variable


@pytest.mark.parametrize("path", READMES, ids=lambda p: p.name)
def test_the_readme_links_every_task_page(path):
    """Where to go next: each task page, the Chinese one from the Chinese README where it exists."""
    text = path.read_text(encoding="utf-8")
    for page in TASK_PAGES:
        chinese = path.name == "README.zh-CN.md" and (ROOT / "docs" / "zh" / f"{page}.md").exists()
        wanted = f"(docs/zh/{page}.md)" if chinese else f"(docs/{page}.md)"
        assert wanted in text, (path.name, wanted)


@pytest.mark.parametrize("name", ZH_PAGES)
def test_the_newcomer_pages_exist_in_chinese(name):
    """docs/zh/ holds the pages a newcomer needs first, in full, each linked from its English page."""
    zh = ROOT / "docs" / "zh" / f"{name}.md"
    assert zh.exists(), zh
    english = ROOT / "docs" / f"{name}.md"
    if english.exists():
        assert f"(zh/{name}.md)" in english.read_text(encoding="utf-8"), name
        assert f"(../{name}.md)" in zh.read_text(encoding="utf-8"), name
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in zh.read_text(encoding="utf-8")) > 500, "not a translation"


def test_the_chinese_troubleshooting_page_has_every_row():
    """A translation, not a summary: every row of the English table, each with its message kept as tmin
    prints it in English (the Chinese message follows --lang)."""
    english = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    chinese = (ROOT / "docs" / "zh" / "troubleshooting.md").read_text(encoding="utf-8")
    rows = [_cells(line) for line in english.splitlines() if line.startswith("| ") and not line.startswith("| symptom")]
    zh_rows = [_cells(line) for line in chinese.splitlines() if line.startswith("| ") and not line.startswith("| 症状")]
    assert len(zh_rows) == len(rows) > 100
    for (_, message, _), (_, zh_message, _) in zip(rows, zh_rows):
        assert zh_message == message, message


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped (letters of any script kept), spaces to -."""
    import re

    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _without_code(path: Path) -> str:
    import re

    return re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    import re

    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{path.name}: {target}"
        if anchor and dest.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", _without_code(dest))}
            assert anchor in anchors, f"{path.name}: {target}: no such heading in {dest.name}"


def _runnable(command: str) -> bool:
    """A synopsis (`tmin report [--out DIR]`, `--task copy|reverse`, `...`) is a form, not a command."""
    import re

    return not re.search(r"\[-|\||\.\.\.|…", command)


def _code_commands(path: Path) -> list[str]:
    """The lines of code that start with tmin, their # comment dropped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [c for c in (line.split("#")[0].strip() for line in lines if line.startswith("tmin ")) if _runnable(c)]


BAD_INPUT_TABLES = ("| symptom |", "| 症状 |")  # troubleshooting tables: symptom, message, fix


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, an empty one (`| a | | c |`) included."""
    import re

    return [cell.strip() for cell in re.split(r"(?<=\s)\|(?=\s)", row.strip()[1:-1])]


def _split_bad_input(path: Path) -> tuple[str, str]:
    """(the page without the symptom and message cells of its troubleshooting tables, those cells): the
    cells quote bad input on purpose; the fix cells stay with the page."""
    page, bad, in_table = [], [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        in_table = line.startswith(BAD_INPUT_TABLES) or (in_table and line.startswith("|"))
        if in_table and line.startswith("| ") and not line.startswith(BAD_INPUT_TABLES):
            cells = _cells(line)
            bad += cells[:2]
            page += cells[2:]
        else:
            page.append(line)
    return "\n".join(page), "\n".join(bad)


def _inline_commands(path: Path, skip_bad_input: bool = False) -> list[str]:
    """`tmin ...` in backticks; with skip_bad_input, not those of a troubleshooting table's symptom and message
    cells (see _bad_input_mentions)."""
    import re

    text = _split_bad_input(path)[0] if skip_bad_input else path.read_text(encoding="utf-8")
    return [c for c in re.findall(r"`(tmin [^`]+)`", text) if _runnable(c)]


def _bad_input_mentions(path: Path) -> list[str]:
    """The commands a troubleshooting table's symptom and message cells quote (a bad value, on purpose)."""
    import re

    return [c for c in re.findall(r"`(tmin [^`]+)`", _split_bad_input(path)[1]) if _runnable(c)]


def _parse_all(commands: list[str]) -> None:
    import shlex

    from transformer_min.cli.main import build_parser
    from transformer_min.verify.registry import STAGES, load_all

    load_all()
    parser = build_parser()
    for command in commands:
        argv = shlex.split(command)[1:]
        args = parser.parse_args(argv)  # SystemExit (a failure here) on an unknown option
        for stage in getattr(args, "stages", None) or []:
            assert stage in STAGES, (command, stage)
        config = getattr(args, "config", None)
        if config is not None and str(config).startswith("configs/"):
            assert (ROOT / str(config)).exists(), (command, config)


def _subcommand(parser, words: list[str]):
    """Walk `channel check`-style subcommands: (the innermost parser, the words left)."""
    import argparse

    while words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or words[0] not in subs[0].choices:
            break
        parser, words = subs[0].choices[words[0]], words[1:]
    return parser, words


def _check_mention(parser, command: str) -> None:
    """A command named in prose (`tmin eval --src`, `tmin eval/translate --search`) or quoted with a bad value
    on purpose: each command exists and each option is one of its options."""
    import shlex

    words = shlex.split(command)[1:]
    for name in words[0].split("/"):
        sub, rest = _subcommand(parser, [name] + words[1:])
        assert sub is not parser, (command, name)
        for word in rest:
            for option in word.split("/") if word.startswith("--") else []:
                assert option.split("=")[0] in sub._option_string_actions, (command, option)


def _names_only(parser, command: str) -> bool:
    """`tmin eval --src`, `tmin eval/translate --search`: commands and options, no value."""
    import shlex

    words = shlex.split(command)[1:]
    return all(w.startswith("-") for w in _subcommand(parser, words[0].split("/")[:1] + words[1:])[1])


@pytest.mark.parametrize("name", COMMAND_PAGES)
def test_every_tmin_command_in_the_docs_parses(name):
    """Each `tmin ...` command a page quotes is accepted by the parser, with known stage names, and a configs/
    file it names exists. A command named in prose by its options alone (`tmin eval --src`) that does not
    parse as it stands, and a bad value a troubleshooting table quotes on purpose, name commands and options
    that exist."""
    from transformer_min.cli.main import build_parser

    path = ROOT / name
    parser = build_parser()
    runnable, mentions = _code_commands(path), _bad_input_mentions(path)
    for command in _inline_commands(path, skip_bad_input=True):
        if _names_only(parser, command):
            try:
                _parse_all([command])
            except SystemExit:
                mentions.append(command)
                continue
        runnable.append(command)
    assert runnable, f"{name} quotes no runnable tmin command"
    _parse_all(runnable)
    for command in mentions:
        _check_mention(parser, command)


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_and_make_target_a_page_names_exists(path):
    """`python benchmarks/x.py --flag`, `bash benchmarks/gpu.sh --flag`, `python verify/check_*.py`, `make TARGET`,
    `torchrun ... -m transformer_min CMD ...`: the file exists, each --flag is one the script (or a script it
    hands its arguments to) reads, the target is in the Makefile, and the module's command line parses."""
    import re

    text = path.read_text(encoding="utf-8").replace("\\\n", " ")  # a command continued on the next line
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for script, args in re.findall(r"(?:python|bash) ((?:benchmarks|verify)/[\w.]+)([^`\n#|]*)", text):
        assert (ROOT / script).exists(), (path.name, script)
        source = (ROOT / script).read_text(encoding="utf-8")
        helpers = set(re.findall(r"(?:benchmarks|verify)/(\w+\.py)", source)) | {"common.py", "_common.py"}
        source += "".join((ROOT / folder / helper).read_text(encoding="utf-8")
                          for helper in helpers for folder in ("benchmarks", "verify") if (ROOT / folder / helper).exists())
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args):
            assert f'"{flag}"' in source or f"{flag})" in source or f"{flag}|" in source, (path.name, script, flag)
    for target in re.findall(r"`make (\w+)", text) + re.findall(r"(?m)^make (\w+)", text):
        assert re.search(rf"(?m)^{target}:", makefile), (path.name, target)
    _parse_all([f"tmin {c.strip()}" for c in re.findall(r"-m transformer_min ([^\n`#\\]+)", text)])
