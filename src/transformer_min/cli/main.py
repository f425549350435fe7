"""`tmin`: a thin command line over the library. Every entry point is `main(argv=None) -> int`.

Subcommands live in `cli/<verb>.py` (the modules of COMMAND_MODULES, each with `add_parsers(subparsers, parents)`),
each a thin layer over one library call; `cli/common.py` loads the command's `Project` once (with the channel's
section) and `cli/argtypes.py` holds the argparse types. torch is imported inside the handlers so `tmin --help`
is instant.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import logging.handlers
import re
import sys

from transformer_min.channel.schema import SECTION as CHANNEL_SECTION
from transformer_min.cli.argtypes import path_arg
from transformer_min.cli.parser import Parser
from transformer_min.core import secrets
from transformer_min.core.errors import TminError
from transformer_min.core.i18n import (add_lang_option, check_lang_option, language, prescan_language, resolve_language,
                                       set_language, tr)

# Modules that register subcommands, in the order `tmin --help` lists them.
COMMAND_MODULES = [
    "transformer_min.cli.verify",
    "transformer_min.cli.report",
    "transformer_min.cli.train",
    "transformer_min.cli.data",
    "transformer_min.cli.translate",
    "transformer_min.cli.export",
    "transformer_min.cli.channel",
    "transformer_min.cli.doctor",
    "transformer_min.cli.explore",
]


def common_options(default=None) -> argparse.ArgumentParser:
    """Options every subcommand accepts, before or after the subcommand name.

    The subcommands' copies default to SUPPRESS, so they never overwrite a value given before
    the subcommand (`tmin --config X verify`).
    """
    p = Parser(add_help=False, argument_default=default)
    g = p.add_argument_group("common options")
    g.add_argument("--config", metavar="PATH", type=path_arg, help="config.toml to use (default: $TMIN_CONFIG or ./config.toml)")
    g.add_argument("--settings", metavar="PATH", type=path_arg, help="settings.json to use (default: ./settings.json)")
    g.add_argument("--log-level", metavar="LEVEL", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="DEBUG, INFO, WARNING or ERROR (overrides settings.json and TMIN_LOG_LEVEL)")
    g.add_argument("--log-file", metavar="PATH", type=path_arg, help="also write the log to this file")
    g.add_argument("--set", metavar="SECTION.KEY=VALUE", action="append", dest="sets" if default is None else "sub_sets",
                   help="set one config key over config.toml and the environment, e.g. --set attention.num_heads=4, "
                        "--set model.positional=rope, --set settings.log_level=DEBUG (repeatable; the value is read "
                        "as TOML, a bare word as a string; a command's own flags still win)")
    add_lang_option(g)
    return p


def installed_release() -> str:
    """The installed distribution's version (pyproject.toml's [project] version)."""
    try:
        return importlib.metadata.version("transformer-min")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return tr("unknown (not installed; fix: pip install -e .)")


def build_parser() -> argparse.ArgumentParser:
    parents = [common_options(argparse.SUPPRESS)]
    parser = Parser(
        prog="tmin", parents=[common_options(None)],
        description='"Attention Is All You Need" as verified, trainable PyTorch code.')
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_release()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name):  # feature not present in this build
                continue
            raise
        module.add_parsers(sub, parents)
    return parser


class CurrentStderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever sys.stderr is when a record is written, not when it was made
    (`main` run in-process, under redirection or pytest's capture, never writes to a closed stream)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ assigns it; the property wins
        pass


LOG_LINE = re.compile(r"^(?:(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: |(调试|信息|警告|错误|严重错误|提示|注意|修正)：)")
ZH_LEVELS = {"DEBUG": "调试", "INFO": "信息", "WARNING": "警告", "ERROR": "错误", "CRITICAL": "严重错误"}
ZH_LABELLED = re.compile(r"^(提示|警告|错误|注意|修正)：")  # a message with its own label gets no level word before it


class LogFormatter(logging.Formatter):
    """`LEVEL module: message`; under zh `警告：message` (a Chinese level word, no module path; none when the
    message has its own label, as `提示：...`, never `警告：提示：`) unless the log level is DEBUG, where the module
    path helps."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if language() == "zh" and logging.getLogger().level > logging.DEBUG:
            message = record.getMessage()
            level = "" if ZH_LABELLED.match(message) else f"{ZH_LEVELS.get(record.levelname, record.levelname)}："
            text = level + message
            return text + ("\n" + self.formatException(record.exc_info) if record.exc_info else "")
        return super().format(record)


def _is_a_log(p) -> bool:
    """True when the file's first line is one of tmin's log lines (an earlier --log-file may be replaced)."""
    try:
        with open(p, "rb") as f:
            first = f.readline(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    return bool(LOG_LINE.match(first))


class LogFileHandler(logging.FileHandler):
    """A FileHandler that, when the file cannot be written (a full disk, /dev/full), says so in one line and
    stops writing it, instead of logging's "--- Logging error ---" report on every record."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's naming
        err = sys.exc_info()[1]
        logging.getLogger().removeHandler(self)
        print(tr("warning: cannot write the log file {path} ({reason}); fix: free space or choose another "
                 "--log-file; logging to it stopped").format(path=self.baseFilename,
                                                             reason=getattr(err, "strerror", None) or err),
              file=sys.stderr)


def _log_file_handler(path: str) -> logging.Handler:
    """A FileHandler for --log-file, or a ConfigError naming the path and the fix (nothing is created
    when the folder is missing)."""
    from pathlib import Path

    from transformer_min.core.errors import ConfigError
    from transformer_min.core.io import check_replaceable

    p = Path(path)
    if p.is_dir():
        raise ConfigError(tr("--log-file {path}: is a folder; fix: give a file path such as {example}").format(
            path=path, example=p / "tmin.log"))
    if not p.parent.is_dir():
        raise ConfigError(tr("--log-file {path}: the folder {folder} does not exist; fix: create it (mkdir -p "
                             "{folder}) or log to an existing folder").format(path=path, folder=p.parent))
    check_replaceable(p, "--log-file", tr("a tmin log"), lambda f: not f.stat().st_size or _is_a_log(f),
                      fix=tr("choose a new log path (e.g. tmin.log) or delete the file first"))
    try:
        return LogFileHandler(p, mode="w", encoding="utf-8")
    except OSError as e:
        raise ConfigError(tr("--log-file {path}: cannot write it ({reason}); fix: choose a writable path").format(
            path=path, reason=e.strerror or e)) from None


def setup_logging(args: argparse.Namespace) -> None:
    """Level: --log-level, else --set settings.log_level / TMIN_LOG_LEVEL / settings.json, else INFO.

    The stderr handler is set up before the project (config.toml, settings.json) is loaded, so the notes it
    logs (an alias read) are shown; the --log-file is opened (truncated) only once the settings are known to be
    good. A command that reports a broken config itself (`tmin doctor`, `set_defaults(config_errors="report")`)
    gets the error as `args.project_error` instead of an exit.
    """
    from transformer_min.cli.common import project_of
    from transformer_min.core.errors import ConfigError

    from transformer_min.core.secrets import SecretFilter

    stderr_handler = CurrentStderrHandler()
    stderr_handler.addFilter(SecretFilter())
    stderr_handler.setFormatter(LogFormatter())
    logging.basicConfig(level=args.log_level or "INFO", handlers=[stderr_handler], force=True)
    root = logging.getLogger()
    early = logging.handlers.MemoryHandler(capacity=10_000, flushLevel=logging.CRITICAL + 1)  # for the log file
    root.addHandler(early)
    try:
        runtime_level = project_of(args).runtime.log_level.upper()
    except ConfigError as e:
        if getattr(args, "config_errors", None) != "report":
            raise
        args.project_error, runtime_level = e, "INFO"
    finally:
        root.removeHandler(early)
    level = args.log_level or runtime_level
    root.setLevel(level)
    if getattr(args, "log_file", None):
        handler = _log_file_handler(args.log_file)
        handler.setFormatter(root.handlers[0].formatter)
        handler.addFilter(SecretFilter())
        root.addHandler(handler)
        early.setTarget(handler)  # what loading the project logged goes into the file too
        early.flush()
    if level != "DEBUG":
        logging.getLogger("httpx").setLevel(logging.WARNING)  # its request lines are noise at INFO


def main(argv: list[str] | None = None) -> int:
    """`tmin ARGS`: stdout and stderr pass through the one redaction point (core.secrets) while it runs, seeded
    with the keys of the environment and the command line (the loader adds those of the files)."""
    secrets.remember_environment(name for name, field in CHANNEL_SECTION.env if field == "api_key")
    argv = sys.argv[1:] if argv is None else list(argv)
    secrets.remember_arguments(argv)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = secrets.ScrubbingStream(out), secrets.ScrubbingStream(err)
    try:
        return run_command(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def run_command(argv: list[str]) -> int:
    """Parse and run one command; a TminError becomes one line on stderr and its exit code."""
    set_language(prescan_language(argv))  # before any error can be raised: --lang, settings.json, the locale
    try:
        check_lang_option(argv)  # a bad --lang is refused even with --help, which exits while parsing
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        setup_logging(args)
        if getattr(args, "project", None) is not None:  # settings.json "language" as loaded (--set included)
            set_language(resolve_language(args.lang, args.project.runtime.language))
        return int(args.func(args) or 0)
    except TminError as e:
        print(tr("error: {message}").format(message=secrets.scrub_known(str(e))), file=sys.stderr)
        return getattr(e, "exit_code", 2)
    except KeyboardInterrupt:
        print(tr("interrupted"), file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
