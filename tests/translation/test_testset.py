"""translation.testset: the --alpha-grid, --hyp-out and --src/--ref checks of `tmin eval`."""

import json

import pytest

from transformer_min.core.errors import ConfigError, DataError
from transformer_min.translation.testset import check_hyp_out, check_test_files, parse_grid


def test_alpha_grid_parses_and_rejects_what_is_not_a_length_penalty():
    assert parse_grid("0.6,1.0,1.4") == [0.6, 1.0, 1.4]
    assert parse_grid(" 0 , 2 ,") == [0.0, 2.0]
    for bad in ["", "0.6,x", "nan", "inf", "-0.2", ","]:
        with pytest.raises(ConfigError, match="--alpha-grid"):
            parse_grid(bad)


def test_hyp_out_replaces_only_an_earlier_eval_output(tmp_path):
    check_hyp_out(tmp_path / "new.txt")  # nothing there: fine
    with pytest.raises(ConfigError, match="is a folder"):
        check_hyp_out(tmp_path)
    other = tmp_path / "metrics.jsonl"
    other.write_text("{}\n")
    with pytest.raises(ConfigError, match="not written by tmin eval"):
        check_hyp_out(other)
    earlier = tmp_path / "hyp.txt"
    earlier.write_text("a man .\n")
    (tmp_path / "hyp.txt.json").write_text(json.dumps({"checkpoint": "c", "split": "val", "sentences": 1}))
    check_hyp_out(earlier)


def test_src_and_ref_files(tmp_path):
    assert check_test_files(None, None, "val") == []
    with pytest.raises(ConfigError, match="--ref needs --src"):
        check_test_files(None, ["r"], None)
    (tmp_path / "s.de").write_text("ein mann .\nein hund .\n")
    (tmp_path / "r.en").write_text("a man .\na dog .\n")
    (tmp_path / "short.en").write_text("a man .\n")
    src, ref = str(tmp_path / "s.de"), str(tmp_path / "r.en")
    assert [p.name for p in check_test_files(src, [ref, ref], None)] == ["s.de", "r.en", "r.en"]
    with pytest.raises(ConfigError, match="exclude each other"):
        check_test_files(src, [ref], "val")
    with pytest.raises(ConfigError, match="--ref FILE"):
        check_test_files(src, None, None)
    with pytest.raises(DataError, match="--ref .*nope.en: no such file"):
        check_test_files(src, [str(tmp_path / "nope.en")], None)
    with pytest.raises(DataError, match="short.en has 1"):
        check_test_files(src, [str(tmp_path / "short.en")], None)
