"""The inputs of `tmin eval`: any test set as --src/--ref files (raw or tokenised, plain or .gz, one or
several references), the --alpha-grid of --tune-alpha, and where the hypotheses may be written."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from transformer_min.core.config import Config
from transformer_min.core.errors import ConfigError, DataError
from transformer_min.core.i18n import tr
from transformer_min.core.io import check_replaceable
from transformer_min.data import text
from transformer_min.data.tokenizer import Tokenizer
from transformer_min.translation.moses import as_track_text
from transformer_min.core.i18n import tr


def parse_grid(grid: str) -> list[float]:
    """--alpha-grid '0.6,1.0,1.4' -> [0.6, 1.0, 1.4]: finite length penalties >= 0 (section 6.1's alpha)."""
    try:
        alphas = [float(x) for x in grid.split(",") if x.strip()]
    except ValueError:
        alphas = []
    if not alphas or any(not math.isfinite(a) or a < 0 for a in alphas):  # nan, inf: not a length penalty
        raise ConfigError(tr("--alpha-grid: expected comma-separated finite alphas >= 0 such as 0.6,1.0,1.4, got {grid!r}").format(grid=grid))
    return alphas


def check_hyp_out(out: Path) -> None:
    """--hyp-out may replace only an earlier `tmin eval` output (the hypotheses and their .json record),
    never another file (metrics.jsonl, a config, a reference); a folder is named."""
    record = out.with_suffix(out.suffix + ".json")
    if out.is_dir():
        raise ConfigError(tr("--hyp-out {out}: is a folder; fix: give a file path such as {out2}").format(out=out, out2=out / 'hyp.txt'))
    for taken in (out, record):
        check_replaceable(taken, "--hyp-out", tr("written by tmin eval"), lambda _: is_eval_output(out),
                          fix=tr("choose another --hyp-out, or delete the file first"))


def is_eval_output(path: Path) -> bool:
    """Whether `path` is hypotheses `tmin eval` wrote or their .json record: the record says so."""
    record = path if path.suffix == ".json" else path.with_suffix(path.suffix + ".json")
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        return isinstance(data, dict) and {"split", "sentences"} <= set(data)
    except (OSError, ValueError, TypeError):
        return False


def check_test_files(src: str | None, refs: list[str] | None, split: str | None) -> list[Path]:
    """--src/--ref: [src, ref, ...] that exist and have the same number of lines; [] without --src."""
    if not src:
        if refs:
            raise ConfigError(tr("--ref needs --src: give the source file the references translate"))
        return []
    if split:
        raise ConfigError(tr("--src and --split exclude each other: score a prepared split or a file pair"))
    if not refs:
        raise ConfigError(tr("--src {src}: give its reference translation with --ref FILE (repeat for several)").format(src=src))
    files = [Path(src)] + [Path(r) for r in refs]
    for opt, f in zip(["--src"] + ["--ref"] * len(refs), files):
        if f.is_dir():
            raise DataError(tr("{opt} {path}: is a folder, not a file; fix: give a plain or .gz text file, one "
                               "sentence per line (e.g. {path}/test.de)").format(opt=opt, path=f))
        if not f.is_file():
            raise DataError(tr("{opt} {f}: no such file; give a plain or .gz text file, one sentence per line").format(opt=opt, f=f))
    for ref in files[1:]:
        pairs = text.read_parallel(files[0], ref)  # misaligned files: the named error
        if not any(s.strip() for s, _ in pairs):
            raise DataError(tr("--src {path}: has no sentences (the file is empty or every line is blank), so "
                               "there is nothing to score; fix: give the test set's source file, one sentence per "
                               "line").format(path=files[0]))
    return files


def read_test_set(files: list[Path], form: str, cfg: Config, tok: Tokenizer,
                  echo: Callable[[str], None]) -> tuple[list[list[int]], list[list[str]], list[str]]:
    """(source id lists, reference lists, the form each file was read as) of --src/--ref files; each
    file's form is told through `echo`. A source line over model.max_len pieces is an error naming it."""
    d = cfg.data
    read = [as_track_text(text.read_lines(f), lang, d.track, form, str(f))
            for f, lang in zip(files, [d.src_lang] + [d.tgt_lang] * (len(files) - 1))]
    for f, (_, used) in zip(files, read):
        echo(tr("{f}: read as {used} text").format(f=f, used=used) + (tr(" (Moses-preprocessed)") if used == "raw" and d.track == "tok" else ""))
    src = tok.encode(read[0][0])
    over = [i for i, s in enumerate(src) if len(s) + 1 > cfg.model.max_len]
    if over:
        i = over[0]
        raise ConfigError(tr("--src {files}: line {i} has {n_src} pieces, more than model.max_len {max_len} allows ({n_over} such lines); shorten or split them").format(files=files[0], i=i + 1, n_src=len(src[i]), max_len=cfg.model.max_len, n_over=len(over)))
    return src, [lines for lines, _ in read[1:]], [used for _, used in read]
