"""Reading parallel text: plain or gzip, one sentence per line, line i of each side aligned."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from transformer_min.config import DataConfig
from transformer_min.errors import DataError


def split_path(data: DataConfig, split: str, lang: str) -> Path:
    """Where a split lives: tok/<split>.lc.norm.tok.<lang>(.gz) or raw/<split>.<lang>(.gz),
    also accepted directly under data_dir."""
    root = Path(data.data_dir)
    stem = f"{split}.lc.norm.tok.{lang}" if data.track == "tok" else f"{split}.{lang}"
    candidates = [root / data.track / stem, root / stem]
    for base in candidates:
        for p in (base.with_name(base.name + ".gz"), base):
            if p.exists():
                return p
    raise DataError(f"data.data_dir: no file for split {split!r} language {lang!r} (looked for "
                    f"{candidates[0]}[.gz]); point data.data_dir at your Multi30k copy (see README 'Data')")


def read_lines(path: Path) -> list[str]:
    """All lines of a plain or gzip text file (newline stripped)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return [line.rstrip("\n").rstrip("\r") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read as UTF-8 text ({e})") from None


def read_parallel(src_path: Path, tgt_path: Path) -> list[tuple[str, str]]:
    """Aligned (source, target) lines; differing line counts are an error naming both files."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"misaligned parallel files: {src_path} has {len(src)} lines but "
                        f"{tgt_path} has {len(tgt)}; line i of each must translate each other")
    return list(zip(src, tgt))


def checksum(paths: list[Path], extra: str = "") -> str:
    """SHA-256 over the files' bytes and the settings that shape the cache."""
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]
