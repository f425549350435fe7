"""The project's one atomic file writer: a kill at any moment leaves the old file or the new one, whole.

Every file tmin writes (checkpoints, metrics, config.toml, hypotheses, figures, reports, data
caches) goes through `atomic_write`: a temporary `.<name>.<random>.tmp` in the same folder, fsync,
then a rename over the target. The file gets the usual mode (0666 minus the umask), as a plain
`open(path, "w")` would give it; `tempfile.mkstemp` alone would leave it 0600.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Callable
from transformer_min.core.i18n import tr

TMP_RE = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")  # what atomic_write leaves if killed mid-write


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Write through `write(tmp_path)` to a temp file in the same folder, fsync, then rename.

    A target that is a folder, or a folder that cannot be made or written, is a ConfigError naming the
    path and the fix (never an OSError trace), raised before anything is created.
    """
    from transformer_min.core.errors import ConfigError

    path = Path(path)
    if path.is_dir():
        raise ConfigError(tr("{path}: is a folder, so tmin cannot write a file there; fix: give a file path (e.g. {path2}) or remove the folder").format(path=path, path2=path / 'out'))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ConfigError(tr("{path}: cannot write it ({value}: {value2}); fix: choose a path in a folder you can write to").format(path=path, value=e.strerror or e, value2=e.filename or path.parent)) from None
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes | str) -> Path:
    """`data` (str is UTF-8 encoded) written atomically to `path`."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(payload))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text)


def remove_stale_temp_files(*folders: str | os.PathLike) -> list[Path]:
    """Delete the `.<name>.*.tmp` files a killed `atomic_write` left in `folders` (not recursive)."""
    removed = []
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if p.is_file() and TMP_RE.match(p.name):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


# ----------------------------------------------------------------------------- replace only what we wrote
# Every command that writes to a path the user names (--out, --static, --csv, --log-file, --hyp-out) asks
# `check_replaceable` first: a missing path is written; an existing one is replaced only when it is
# recognisably an earlier output of the same command (`recognise`: a marker, a format check or a manifest);
# otherwise the command refuses, naming the path, and --force does not change that.
PAGE_MARKER = '<meta name="generator" content="{command}">'  # in every HTML page tmin writes


def page_marker(command: str) -> str:
    """The marker line of an HTML page `command` writes (`tmin explore`, `tmin report`)."""
    return PAGE_MARKER.format(command=command)


def head_text(path: Path, size: int = 8192) -> str:
    """The first `size` bytes of a file as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


def has_marker(*markers: str) -> Callable[[Path], bool]:
    """A recogniser: the file's first 8 KB hold one of `markers`."""
    return lambda p: any(m in head_text(p) for m in markers)


def holds_only(names: Callable[[Path], set[str]]) -> Callable[[Path], bool]:
    """A recogniser of folders: every entry of the folder is one `names(folder)` lists (its manifest)."""
    def recognise(folder: Path) -> bool:
        listed = names(folder)
        return bool(listed) and all(p.name in listed or TMP_RE.match(p.name) for p in folder.iterdir())
    return recognise


def check_replaceable(path: str | os.PathLike, flag: str, what: str, recognise: Callable[[Path], bool],
                      folder: bool = False, fix: str | None = None) -> Path:
    """`path` if it may be written: missing, an empty folder (for a `folder` output) or recognisably an earlier
    `what` (`recognise(path)`); else a ConfigError naming `flag`, the path and the fix. A file where a folder
    is wanted, or a folder where a file is wanted, is named as such; `fix` replaces the usual advice."""
    from transformer_min.core.errors import ConfigError
    from transformer_min.core.i18n import tr

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return p
    if folder and not p.is_dir():
        raise ConfigError(tr("{flag} {path}: is a file, not a folder, so it is left as it is; fix: choose a directory "
                             "that does not exist yet (it is created)").format(flag=flag, path=p))
    if not folder and p.is_dir():
        raise ConfigError(tr("{flag} {path}: is a folder; fix: give a file path such as {example}").format(
            flag=flag, path=p, example=p / "out"))
    if folder and not any(p.iterdir()):
        return p
    if recognise(p):
        return p
    raise ConfigError(tr("{flag} {path}: exists and is not {what}, so tmin leaves it as it is (even with --force); "
                         "fix: {fix}").format(flag=flag, path=p, what=what,
                                              fix=fix or tr("choose a new path, or move it away first")))
