"""Issue 38, item 5: the label columns of `tmin doctor` and `tmin channel check` line up in a terminal under
--lang zh, where a CJK character takes two columns. Columns are counted here with unicodedata directly."""

from __future__ import annotations

import re
import unicodedata

import pytest

from transformer_min.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")


def columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def value_column(line: str) -> int | None:
    """The terminal column where the value starts: after the label and its padding of two or more spaces."""
    m = re.match(r"(.*?\S)( {2,})\S", line)
    return columns(m.group(1) + m.group(2)) if m else None


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_doctor_values_start_in_one_column(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(["doctor", "--lang", "zh", "--probe-seconds", "0"], capsys)
    rows = [line for line in out.splitlines() if line and not line.startswith("  ")]
    assert code == 0 and sum(any("\u4e00" <= ch <= "\u9fff" for ch in line.split("  ")[0]) for line in rows) >= 5
    starts = {line: value_column(line) for line in rows}
    assert set(starts.values()) == {19}, starts  # WIDTH 18 and a space, CJK labels included


def test_channel_check_values_start_in_one_column(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("TAOTOKEN_API_KEY", "TMIN_API_KEY", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-test-0123456789abcdef")
    code, out, _ = run(["channel", "check", "--lang", "zh", "--set", "taotoken.base_url=http://127.0.0.1:9",
                        "--set", "taotoken.timeout=2"], capsys)
    assert code == 3
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["通道", "base_url", "协议", "密钥", "模型", "超时", "结果"]
    assert {value_column(line) for line in lines} == {10}, lines
