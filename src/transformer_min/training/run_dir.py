"""The run directory: where it is (train.out_dir / train.name), what it holds, and a new run's guards.

A run writes config.toml, metrics.jsonl, metrics.png, spm.model (translation) and checkpoints/ into it;
a new run never mixes with an earlier one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from pathlib import Path, PurePath

from transformer_min.core.config import Config, origin_of
from transformer_min.core.errors import ConfigError
from transformer_min.core.io import TMP_RE
from transformer_min.model.saved import checkpoint_dir, list_checkpoints
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)


def to_toml(data: dict) -> str:
    """Serialise our flat two-level config dict as TOML (the resolved config of a run), with tomli_w: one
    [section] per table, a None value left out (the key's default then applies when the file is read)."""
    import tomli_w

    return tomli_w.dumps({section: {k: v for k, v in fields.items() if v is not None}
                          for section, fields in data.items()})


RUN_FILES = ("config.toml", "metrics.jsonl", "metrics.png", "spm.model")  # what a run writes beside checkpoints/


def make_run_dir(cfg: Config) -> Path:
    """out_dir/name; a name that would leave out_dir ("..", an absolute path) is refused."""
    name = cfg.train.name or f"{cfg.train.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(cfg.train.out_dir)
    parts = PurePath(name).parts
    run_dir = out / name
    inside = bool(parts) and not PurePath(name).is_absolute() and ".." not in parts
    if inside:  # a symlink inside out_dir may still lead out of it
        base = out.resolve()
        inside = run_dir.resolve() != base and run_dir.resolve().is_relative_to(base)
    if not inside:
        raise ConfigError(tr("{where}train.name (--name): {name!r} leaves train.out_dir {out!r} (the run would be written to {resolve}); fix: use a plain name such as 'copy-2', and --out-dir to choose where runs go").format(where=origin_of(cfg, "train.name"), name=name, out=str(out), resolve=run_dir.resolve()))
    return run_dir


def holds_run(run_dir: Path) -> bool:
    """Whether run_dir has anything of an earlier run (config, metrics, checkpoints)."""
    ckpts = checkpoint_dir(run_dir)
    return any((run_dir / f).exists() for f in RUN_FILES[:2]) or (
        ckpts.is_dir() and any(not TMP_RE.match(p.name) for p in ckpts.iterdir()))


def check_new_run_dir(run_dir: Path, overwrite: bool, where: str = "") -> None:
    """A new run never mixes with an earlier one: refuse a run directory that holds one, unless --overwrite.
    `where`: the source of train.name as a refusal's prefix (`origin_of`)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(tr("{where}train.name (--name): {run_dir} exists and is not a folder; fix: choose another --name (or train.name), or move that file").format(where=where, run_dir=run_dir))
    if overwrite or not holds_run(run_dir):
        return
    n = len(list_checkpoints(run_dir))
    raise ConfigError(tr("{run_dir} already holds a run ({n} step checkpoints); nothing was changed. Continue it with: tmin train --resume {run_dir}; or choose another --name; or pass --overwrite to delete it and start again").format(run_dir=run_dir, n=n))


LOCK_FILE = ".lock"  # held (flock) by the one tmin train that writes the run; the kernel lets go when it exits


@contextlib.contextmanager
def run_dir_held(run_dir: Path):
    """One writer per run directory: a second `tmin train` (a --resume, an --overwrite) of a run that is still
    training is refused before it changes anything, instead of two processes writing the same checkpoints and log.

    An exclusive flock on run_dir/.lock, taken without waiting and held until the block ends; the kernel drops
    it when the process ends in any way (Ctrl-C, kill -9, a crash), so no stale lock is ever left to remove.
    Where flock does not exist (Windows) the block runs unguarded.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    create_run_dir(run_dir)
    fd = open_lock(run_dir, os.O_RDWR | os.O_CREAT)
    try:
        lock_or_refuse(fd, run_dir, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it could let two processes lock two files)


def open_lock(run_dir: Path, flags: int) -> int:
    """A descriptor of run_dir/.lock, opened without following a link: a link there is refused (our process id is
    never written into the file it points to), and so is a folder or anything but a plain file."""
    lock = run_dir / LOCK_FILE
    try:
        fd = os.open(lock, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if lock.is_symlink():
            raise ConfigError(tr("{lock} is a symbolic link, not tmin train's lock file; nothing was changed (a link is never written through); fix: remove the link (rm {lock}; what it points to stays), then run this again").format(lock=lock)) from None
        if lock.is_dir():
            raise ConfigError(tr("{lock} is a folder, not tmin train's lock file; nothing was changed; fix: move that folder out of {run_dir}, then run this again").format(lock=lock, run_dir=run_dir)) from None
        raise ConfigError(tr("{lock}: cannot open tmin train's lock file ({reason}); nothing was changed; fix: give this user read and write access to {run_dir}").format(lock=lock, reason=e.strerror or e, run_dir=run_dir)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(tr("{lock} is not a plain file, so it cannot be tmin train's lock file; nothing was changed; fix: move it out of {run_dir}, then run this again").format(lock=lock, run_dir=run_dir))
    return fd


def lock_or_refuse(fd: int, run_dir: Path, kind: int) -> None:
    """flock `kind` on the lock file `fd` without waiting; held by another tmin train: refused, naming its process
    (the caller closes `fd`)."""
    import fcntl

    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
        raise ConfigError(tr("{run_dir} is in use by another tmin train (process {pid}); nothing was changed. Wait for it to finish, or stop it (Ctrl-C in its terminal, or kill -INT {pid}: it saves a checkpoint), then run this again").format(run_dir=run_dir, pid=holder)) from None


def check_not_in_use(resume: Path) -> None:
    """--resume, before any checkpoint is looked for: the run (a folder, or a checkpoint in its checkpoints/) is
    not being trained by another tmin train, even one that has not written its first checkpoint yet. Creates
    nothing: without a lock file no tmin train holds the run."""
    run_dir = resume if resume.is_dir() else resume.parent.parent
    if os.name != "posix" or not (resume.is_dir() or resume.parent.name == "checkpoints") or not (
            os.path.lexists(run_dir / LOCK_FILE)):
        return
    import fcntl

    fd = open_lock(run_dir, os.O_RDONLY)
    try:
        lock_or_refuse(fd, run_dir, fcntl.LOCK_SH)
    finally:
        os.close(fd)  # free: let go at once; tmin train takes it for good in run_dir_held


def clear_run(run_dir: Path) -> None:
    """--overwrite: remove what an earlier run wrote (checkpoints, config, metrics, vocabulary, hypotheses)."""
    import shutil

    shutil.rmtree(checkpoint_dir(run_dir), ignore_errors=True)
    for p in [*(run_dir / f for f in RUN_FILES), *run_dir.glob("hyp.*")]:
        p.unlink(missing_ok=True)
    log.warning(tr("--overwrite: removed the earlier run in %s"), run_dir)


def create_run_dir(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(tr("train.out_dir (--out-dir): cannot create the run directory {run_dir} ({strerror}); choose a folder you can write to").format(run_dir=run_dir, strerror=e.strerror)) from None
