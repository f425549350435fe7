"""Moses-exact input (issue 17): raw text is preprocessed as the Multi30k tok files were made (lowercase,
Moses punctuation normaliser, Moses tokenizer), so `tmin translate` and `tmin eval --src` see what
training saw."""

import gzip
import os
from pathlib import Path

import pytest

from transformer_min.translation.moses import moses_preprocess, normalize_input

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("lang, raw, tok", [
    # apostrophes: English keeps 's together, German splits on both sides; both escape ' as &apos;
    ("en", "A boy sits on a woman's shoulders.", "a boy sits on a woman &apos;s shoulders ."),
    ("de", "Trader Joe's Tasche.", "trader joe &apos; s tasche ."),
    # German low-high quotes become " (escaped &quot;), and a final period inside them moves out
    ("de", "Ein Mann sagt: „Hallo.“", "ein mann sagt : &quot; hallo &quot; ."),
    # English moves the period inside the quotes instead; & is escaped; the comma splits off
    ("en", 'Two dogs, 3 cats & a "bird".', "two dogs , 3 cats &amp; a &quot; bird . &quot;"),
    # a hyphenated word stays whole (no aggressive dash splitting); spaces are squeezed
    ("en", "  An  up-side   down  CAT  ", "an up-side down cat"),
])
def test_hand_written_sentences(lang, raw, tok):
    assert moses_preprocess([raw], lang) == [tok]
    assert normalize_input(raw, "tok", lang) == tok


def test_raw_track_input_is_only_stripped():
    assert normalize_input("  A man's hat.  ", "raw", "en") == "A man's hat."


def _data_dir() -> Path:
    """MULTI30K_DIR, else data.data_dir of the shipped De->En config (relative to the repository root)."""
    if os.environ.get("MULTI30K_DIR"):
        return Path(os.environ["MULTI30K_DIR"])
    from transformer_min.core.project import load_project

    d = Path(load_project(REPO / "configs" / "multi30k_de_en.toml", quiet=True).config.data.data_dir)
    return d if d.is_absolute() else REPO / d


@pytest.mark.parametrize("lang", ["de", "en"])
def test_raw_val_file_gives_the_tok_file(lang):
    root = _data_dir()
    raw, tok = root / "raw" / f"val.{lang}.gz", root / "tok" / f"val.lc.norm.tok.{lang}.gz"
    if not (raw.exists() and tok.exists()):
        pytest.skip(f"Multi30k val not found under {root} (set MULTI30K_DIR)")
    with gzip.open(raw, "rt", encoding="utf-8") as f:
        raw_lines = f.read().splitlines()
    with gzip.open(tok, "rt", encoding="utf-8") as f:
        tok_lines = f.read().splitlines()
    assert len(raw_lines) == len(tok_lines) > 1000
    same = sum(a == b for a, b in zip(moses_preprocess(raw_lines, lang), tok_lines))
    assert same / len(tok_lines) >= 0.99, f"{lang}: {same} of {len(tok_lines)} lines equal the tok file"
