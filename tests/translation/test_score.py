"""translation.score: corpus BLEU and chrF, checked against values worked out by hand (Papineni et al., 2002:
BLEU = BP * exp(mean log p_n), n = 1..4, counts clipped by the most a reference holds)."""

import pytest

from transformer_min.translation.score import score, score_refs


def test_bleu_by_hand_on_one_sentence():
    # 5 words, the last one wrong: p1 = 4/5, p2 = 3/4, p3 = 2/3, p4 = 1/2, equal lengths so BP = 1
    s = score(["a b c d e"], ["a b c d f"], "tok")
    want = 100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25  # 66.874...
    assert s["bleu"] == pytest.approx(want, abs=1e-9) and want == pytest.approx(66.874, abs=1e-3)
    assert s["bp"] == 1.0 and (s["sys_len"], s["ref_len"]) == (5, 5)


def test_a_second_reference_clips_by_the_best_and_takes_the_closest_length():
    # every n-gram of the hypothesis is in the second reference; its length 6 is farther than 5
    s = score_refs(["a b c d e"], [["a b c d f"], ["x a b c d e"]], "tok")
    assert s["bleu"] == pytest.approx(100.0) and s["ref_len"] == 5


def test_brevity_penalty_by_hand():
    # hypothesis of 4 words against a reference of 8 that contains it: every p_n = 1, BP = exp(1 - 8/4)
    import math

    s = score(["a b c d"], ["a b c d e f g h"], "tok")
    assert s["bp"] == pytest.approx(math.exp(-1.0)) and s["bleu"] == pytest.approx(100 * math.exp(-1.0))


def test_the_tok_track_scores_the_text_as_it_is_and_the_raw_track_tokenizes_it():
    # tok: "d." is one token, so only p1..p3 of "a b c d." vs "a b c d ." differ; raw (13a) splits the period
    tok, raw = score(["a b c d."], ["a b c d ."], "tok"), score(["a b c d."], ["a b c d ."], "raw")
    assert "tok:none" in tok["bleu_signature"] and "tok:13a" in raw["bleu_signature"]
    assert raw["bleu"] == pytest.approx(100.0) and tok["bleu"] < 100.0


def test_chrf_is_100_on_a_perfect_hypothesis_and_lower_otherwise():
    assert score(["ein hund läuft ."], ["ein hund läuft ."], "tok")["chrf"] == pytest.approx(100.0)
    assert score(["ein hund sitzt ."], ["ein hund läuft ."], "tok")["chrf"] < 100.0
