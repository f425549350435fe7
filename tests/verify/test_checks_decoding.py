"""verify/checks/decoding.py: beam 4, GNMT length penalty, max length input + 50; broken versions fail."""

from __future__ import annotations

import builtins


from tests.verify.helpers import run





def test_plain_length_power_fails(monkeypatch):
    monkeypatch.setattr("transformer_min.decoding.search.length_penalty", lambda length, alpha: length ** alpha)
    assert not run("decoding.length_penalty_gnmt").passed
    assert not run("decoding.beam_score_normalised").passed


def test_wrong_length_limit_fails(monkeypatch):
    from transformer_min.decoding import search as decoding

    real = decoding.max_output_lengths
    monkeypatch.setattr(decoding, "max_output_lengths", lambda src, pad_id, offset: real(src, pad_id, offset) - 1)
    o = run("decoding.max_length_input_plus_50")
    assert not o.passed and "[56, 54]" in o.result.measured


def test_missing_decoding_module_is_a_fail_row_not_a_crash(monkeypatch):
    real_import = builtins.__import__

    def no_decoding(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "transformer_min.decoding" and fromlist and "search" in fromlist:
            raise ImportError("cannot import name 'search'")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_decoding)
    o = run("decoding.length_penalty_gnmt")
    assert not o.passed and o.error.startswith("ImportError")
