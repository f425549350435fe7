"""Reading parallel text: plain or gzip, one sentence per line, line i of each side aligned."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path

from transformer_min.core.config import DataConfig
from transformer_min.core.errors import DataError
from transformer_min.core.i18n import tr


def split_path(data: DataConfig, split: str, lang: str, where: str = "") -> Path:
    """Where a split lives: tok/<split>.lc.norm.tok.<lang>(.gz) or raw/<split>.<lang>(.gz),
    also accepted directly under data_dir; `where`: the source of data.data_dir as a refusal's prefix
    (`core.config.origin_of`)."""
    root = Path(data.data_dir)
    stem = f"{split}.lc.norm.tok.{lang}" if data.track == "tok" else f"{split}.{lang}"
    candidates = [root / data.track / stem, root / stem]
    for base in candidates:
        for p in (base.with_name(base.name + ".gz"), base):
            if p.exists():
                if not p.is_file():
                    raise DataError(tr("{p}: cannot read split {split!r}: it is a folder, not a text file; put the file there or point data.data_dir at your Multi30k copy").format(p=p, split=split))
                return p
    raise DataError(tr("{where}data.data_dir = {data_dir!r}: no file for split {split!r} language {lang!r} (looked for {candidates}[.gz]); fix: point data.data_dir at your Multi30k copy (see docs/translation.md)").format(where=where, data_dir=str(data.data_dir), split=split, lang=lang, candidates=candidates[0]))


def read_lines(path: Path) -> list[str]:
    """All lines of a plain or gzip text file (split at "\\n"; a trailing "\\r" is dropped).

    A byte that is not UTF-8 is reported with its line number; a cut or damaged .gz names the file.
    """
    path = Path(path)
    try:
        if path.suffix == ".gz" and path.is_file() and path.stat().st_size == 0:  # gzip reads it as no text
            raise DataError(tr("{path}: the gzip file is empty (0 bytes), not a compressed split; download or copy it again (or, if the split is meant to be empty, remove it and fix data.data_dir)").format(path=path))
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            data = path.read_bytes()
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        what = tr("is truncated") if isinstance(e, EOFError) else tr("is damaged or not gzip ({reason})").format(reason=e)
        raise DataError(tr("{path}: the gzip file {what}; download or copy it again (or, if it is plain text, drop the .gz from its name)").format(path=path, what=what)) from None
    except OSError as e:
        raise DataError(tr("{path}: cannot read ({value}); check the file and data.data_dir").format(path=path, value=e.strerror or e)) from None
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (Windows editors) is not part of sentence 1
        data = data[3:]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, raw in enumerate(lines, 1):
        try:
            out.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise DataError(tr("{path}, line {number}: byte 0x{raw:02x} at column {start} is not UTF-8; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)").format(path=path, number=number, raw=raw[e.start], start=e.start + 1)) from None
    return out


def read_parallel(src_path: Path, tgt_path: Path) -> list[tuple[str, str]]:
    """Aligned (source, target) lines; differing line counts are an error naming both files."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(tr("misaligned parallel files: {src_path} has {n_src} lines but {tgt_path} has {n_tgt}; line i of each must translate each other").format(src_path=src_path, n_src=len(src), tgt_path=tgt_path, n_tgt=len(tgt)))
    return list(zip(src, tgt))


def checksum(paths: list[Path], extra: str = "") -> str:
    """SHA-256 over the files' bytes and the settings that shape the cache."""
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(str(p.name).encode())
        try:
            h.update(p.read_bytes())
        except OSError as e:
            raise DataError(tr("{p}: cannot read ({value}); check the file and data.data_dir").format(p=p, value=e.strerror or e)) from None
    return h.hexdigest()[:16]
