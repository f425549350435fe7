"""`verify --llm` review: prompt, skipped / ok / error statuses, and the advisory heading."""

from __future__ import annotations

import pytest

from transformer_min.channel.review import HEADING, build_prompt, format_review, review_attention
from transformer_min.core.errors import ConfigError
from transformer_min.channel.schema import SECTIONS, channel_part
from transformer_min.core.project import load_project

from .conftest import GOOD_KEY, assert_no_key, write_settings


def channel(settings_path=None):
    """The channel part the one loader hands `tmin verify --llm` (settings.json only, no environment)."""
    return channel_part(load_project(None, settings_path, {}, quiet=True, sections=SECTIONS))

SUMMARY = {
    "shape": [1, 4, 3, 3],
    "row_sums": [1.0, 0.9999999, 1.0],
    "head0": [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.33, 0.33, 0.34]],
    "entropy_per_head": [0.6365, 0.61, 0.7, 0.5],
    "local_verdict": "PASS",
}


def test_prompt_is_compact_and_complete():
    prompt = build_prompt(SUMMARY)
    assert "Local verdict (authoritative): PASS" in prompt
    assert "shape: [1, 4, 3, 3]" in prompt
    assert "Row sums (each should be 1): [1, 1, 1]" in prompt
    assert "  [0.5, 0.5, 0]" in prompt
    assert "Start with PLAUSIBLE or SUSPICIOUS" in prompt


def test_prompt_cuts_long_inputs():
    big = dict(SUMMARY, head0=[[0.01] * 50] * 50, row_sums=[1.0] * 50)
    prompt = build_prompt(big)
    # cut where `tmin verify` cuts its printout (16 rows and columns), so the model sees what the reader saw
    assert "… (34 more rows)" in prompt and "… (34 more)" in prompt
    assert len(prompt) < 4000


def test_skipped_without_key():
    status, text = review_attention(SUMMARY, channel=channel())
    assert status == "skipped"
    assert text.startswith("LLM review skipped: no key configured; to enable it, set TAOTOKEN_API_KEY")
    assert "\n" not in text
    assert format_review(status, text) == text


def test_ok_returns_the_verdict(tmp_path, gateway):
    path = write_settings(tmp_path, api_base=gateway.url, api_key=GOOD_KEY, model="good")
    status, text = review_attention(SUMMARY, channel=channel(path))
    assert status == "ok"
    assert text.startswith("echo: Local verdict (authoritative): PASS")
    assert gateway.requests[0]["json"]["messages"][0]["role"] == "system"
    assert format_review(status, text) == f"{HEADING}\n{text}"


def test_fail_stays_fail(tmp_path, gateway):
    path = write_settings(tmp_path, api_base=gateway.url, api_key=GOOD_KEY, model="good")
    status, text = review_attention(dict(SUMMARY, local_verdict="FAIL"), channel=channel(path))
    assert status == "ok"
    assert text.endswith("(The local verdict FAIL stands whatever the model says.)")


def test_channel_errors_are_returned_not_raised(tmp_path, gateway):
    path = write_settings(tmp_path, api_base=gateway.url, api_key="sk-wrong-000000000000dead", model="good")
    status, text = review_attention(SUMMARY, channel=channel(path))
    assert status == "error"
    assert text.startswith("LLM review failed: the server rejected the key sk-…dead")
    assert_no_key(text, key="sk-wrong-000000000000dead")
    assert format_review(status, text).startswith(HEADING)


def test_bad_config_is_the_loaders_error(tmp_path):
    # the files are read once, before any check runs: a bad value stops the command there, naming the key
    path = write_settings(tmp_path, api_key=GOOD_KEY, timeout=-1)
    with pytest.raises(ConfigError, match="timeout must be a positive number"):
        channel(path)
