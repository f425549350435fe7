"""Issue 38, item 3: a skip is never counted as a pass, on any surface. `verify.summary.summarize` is the one count;
the terminal line of `tmin report`, report.md, report.html and `tmin verify`'s last line all print it. The
expected counts below are taken from claims.csv (one row per check, written row by row) and from hand-written
cases, never from the summary under test."""

from __future__ import annotations

import csv

import pytest

from transformer_min.cli.main import main
from transformer_min.verify.summary import Summary, summarize

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

# Post 003's other head sizes: d_k * h != d_model, which torch's layers cannot hold, so the checks against them skip.
FREE_HEADS = ("[model]\nd_model = 32\nnum_heads = 4\nd_k = 4\nd_v = 4\nfree_head_dims = true\nd_ff = 64\n"
              "num_layers = 2\nmax_len = 64\n[vocab]\nsrc_size = 50\ntgt_size = 50\n[verify]\nseq_len = 8\n"
              "batch_size = 2\n")


# ------------------------------------------------------------------------------------ the function itself
@pytest.mark.parametrize("verdicts,line,claims", [
    (["PASS", "PASS", "SKIP"], "2 passed, 0 failed, 1 skipped (not run)", "2/3 claims PASS, 1 SKIP (not run)"),
    (["PASS", "FAIL", "SKIP", "SKIP"], "1 passed, 1 failed, 2 skipped (not run)",
     "1/4 claims PASS, 1 FAIL, 2 SKIP (not run)"),
    (["SKIP", "SKIP"], "0 passed, 0 failed, 2 skipped (not run)", "0/2 claims PASS, 2 SKIP (not run)"),
    (["PASS"], "1 passed, 0 failed", "1/1 claims PASS"),
    ([], "0 passed, 0 failed", "0/0 claims PASS"),
])
def test_summary_lines_count_skips_apart(verdicts, line, claims):
    s = summarize((f"c{i}", v) for i, v in enumerate(verdicts))
    assert (s.line(), s.claims_line()) == (line, claims)
    assert s.ok == ("FAIL" not in verdicts)
    assert s.as_dict()["skipped_ids"] == [f"c{i}" for i, v in enumerate(verdicts) if v == "SKIP"]


def test_summary_in_chinese():
    from transformer_min.core.i18n import set_language

    set_language("zh")
    s = Summary(passed=("a", "b"), skipped=("c",))
    assert s.claims_line() == "2/3 条论断通过，1 项跳过（未运行）"
    assert s.line() == "2 项通过，0 项失败，1 项跳过（未运行）"


def test_summary_refuses_an_unknown_verdict():
    with pytest.raises(ValueError, match="'OK'"):
        summarize([("x", "OK")])


# ------------------------------------------------------------------------------------ tmin report, the bar
def _claims_csv(out):
    with open(out / "data" / "claims.csv", newline="", encoding="utf-8") as f:
        return {row["id"]: row["result"] for row in csv.DictReader(f)}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_report_terminal_names_the_skips_and_does_not_count_them_as_passed(tmp_path, monkeypatch, capsys, lang):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(FREE_HEADS, encoding="utf-8")
    code = main(["report", "--quick", "--stage", "multihead", "--stage", "encoder", "--config", "c.toml",
                 "--out", "r", "--lang", lang])
    out = capsys.readouterr().out
    assert code == 0  # a skip is not a failure either
    rows = _claims_csv(tmp_path / "r")
    skipped = sorted(k for k, v in rows.items() if v == "SKIP")
    passed = sum(v == "PASS" for v in rows.values())
    assert skipped == ["encoder.matches_torch_layer", "multihead.matches_torch"] and passed == len(rows) - 2
    lines = out.strip().splitlines()
    skip_word = "[跳过]" if lang == "zh" else "[SKIP]"
    assert sorted(line.split()[1] for line in lines if line.startswith(skip_word)) == skipped  # named, each
    if lang == "en":
        first = f"{passed}/{len(rows)} claims PASS, 2 SKIP (not run); report written to "
    else:
        first = f"{passed}/{len(rows)} 条论断通过，2 项跳过（未运行）；报告已写入 "
    assert lines[-1].startswith(first), lines[-1]
    assert f"{len(rows)}/{len(rows)}" not in out
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    verdict = first.split(";" if lang == "en" else "；")[0]
    assert f"**{verdict}**" in md and verdict in html  # the same count on the three surfaces


def test_verify_last_line_is_the_same_count(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(FREE_HEADS, encoding="utf-8")
    assert main(["verify", "multihead", "encoder", "--config", "c.toml"]) == 0
    out = capsys.readouterr().out
    verdicts = [line[1:5] for line in out.splitlines() if line[:6] in ("[PASS]", "[FAIL]", "[SKIP]")]
    assert verdicts.count("SKIP") == 2
    assert out.strip().splitlines()[-1] == f"{verdicts.count('PASS')} passed, 0 failed, 2 skipped (not run)"
