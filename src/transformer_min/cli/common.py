"""What every command shares: its `Project` (config.toml, settings.json, the environment and --set, loaded
once per command line, with the channel's section `channel.schema.SECTIONS`) and the language of its messages."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from transformer_min.channel.schema import SECTIONS
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import resolve_language, set_language, tr
from transformer_min.core.project import Project, load_project


def sets_of(args: argparse.Namespace) -> list[str]:
    """The --set items given before the subcommand, then those after it (a later item wins)."""
    return [*(getattr(args, "sets", None) or []), *(getattr(args, "sub_sets", None) or [])]


def project_of(args: argparse.Namespace) -> Project:
    """The command's Project, loaded on first use and kept on `args` (every file is read once).

    A subcommand may give its own default config file (`set_defaults(default_config=fn)`, fn(args) -> path or
    None: `tmin train --task copy` reads configs/copy.toml) and may not need one (`set_defaults(needs_config=False)`:
    decode, translate, eval and average take theirs from a checkpoint, the channel commands read only
    [taotoken]; no note then when there is no ./config.toml)."""
    project = getattr(args, "project", None)
    if project is None:
        default = getattr(args, "default_config", None)
        project = load_project(getattr(args, "config", None), getattr(args, "settings", None), os.environ,
                               sets_of(args), default_config=default(args) if callable(default) else None,
                               quiet=not getattr(args, "needs_config", True), sections=SECTIONS)
        args.project = project
    return project


def use_language_of(args: argparse.Namespace) -> str:
    """Resolve --lang / settings.json "language" / the locale for a subcommand and switch to it."""
    lang = resolve_language(getattr(args, "lang", None), project_of(args).runtime.language)
    set_language(lang)
    return lang


def csv_dir(path: str | Path) -> Path:
    """The folder for --csv DIR, created if missing; ConfigError naming --csv when it is a file."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(tr("--csv {path}: is a file, not a folder; fix: pass a folder name (it is created)").format(path=path))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(tr("--csv {path}: cannot create the folder ({reason}); fix: pass a writable folder").format(
            path=path, reason=e.strerror)) from None
    return directory
