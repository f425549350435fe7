"""Input text as the model was trained on it: the Multi30k task-1 preprocessing (Moses lowercase,
punctuation normaliser and tokenizer, through sacremoses) on the tok track, stripped text on the raw track."""

from __future__ import annotations

import functools

from transformer_min.core.errors import DataError
from transformer_min.core.i18n import tr


def normalize_input(line: str, track: str, lang: str = "en") -> str:
    """What a user types, preprocessed as the training data was: on the tok track, the Multi30k
    pipeline (`moses_preprocess`); on the raw track, only stripped."""
    if track != "tok":
        return line.strip()
    return moses_preprocess([line], lang)[0]


def moses_preprocess(lines: list[str], lang: str) -> list[str]:
    """The preprocessing the Multi30k tok files (`*.lc.norm.tok.*`) were made with, the dataset's task-1
    script: Moses lowercase.perl, normalize-punctuation.perl -l LANG, tokenizer.perl -l LANG, here through
    sacremoses. As in the Perl pipeline the tokenizer escapes & ' " < > | [ ] as XML entities (&apos; ...),
    and the normaliser sees each line with its newline, which some of its rules test for (a German
    „quote.“ ends as &quot; . , not . &quot;). Reproduces the shared val and test files line for line."""
    norm, tok = moses_tools(lang)
    return [tok.tokenize(norm.normalize(line.strip().lower() + "\n").strip(), escape=True, return_str=True)
            for line in lines]


def as_track_text(lines: list[str], lang: str, track: str, form: str, name: str) -> tuple[list[str], str]:
    """A test file's lines (`tmin eval --src/--ref`) as the text the model was trained on, and the form
    they were read as. form "tok": already preprocessed like the Multi30k tok files, used as they are;
    "raw": original text, preprocessed with `moses_preprocess` on the tok track, only stripped on the
    raw track; "auto": tok when at least half of the non-empty lines are left unchanged by
    `moses_preprocess` (Multi30k's raw files: at most 0.2% of lines; its tok files: 97-99.5% in English
    and German, 60% in French, whose apostrophes change on a second pass)."""
    pre = None
    if form == "auto":
        pre = moses_preprocess(lines, lang)
        pairs = [(a.strip(), b) for a, b in zip(lines, pre) if a.strip()]
        form = "tok" if pairs and 2 * sum(a == b for a, b in pairs) >= len(pairs) else "raw"
    if form == "tok" and track != "tok":
        raise DataError(tr('{name}: reads as lowercased Moses-tokenised text, but the checkpoint was trained on the raw track (data.track = "raw"): give the original text, or --form raw to use the file as it is').format(name=name))
    if form == "tok" or track != "tok":
        return [line.strip() for line in lines], form
    return (pre if pre is not None else moses_preprocess(lines, lang)), form


@functools.lru_cache(maxsize=None)
def moses_tools(lang: str):
    """sacremoses' punctuation normaliser and tokenizer for `lang`, built once per language."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
