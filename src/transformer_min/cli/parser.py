"""argparse in the user's language: its own errors ("unrecognized arguments", "invalid choice", a missing
argument) come out through the message catalog like every other error, as one `error:` / `错误：` line with
the fix, after the usage line, and exit 2 as argparse does.

argparse builds these messages from fixed English templates; `translate_argparse` matches the ones a reader
meets and renders them through `tr` (a message that matches none, such as one our own argument types raise,
is already in the catalog's language and is passed through).
"""

from __future__ import annotations

import argparse
import re
import sys

from transformer_min.core.i18n import tr, tr_matching
from transformer_min.core.textwidth import pad, wrap

# (argparse's English message, the catalog's message with the same fields)
ARGPARSE_MESSAGES = (
    (re.compile(r"^unrecognized arguments: (?P<args>.*)$"),
     "unrecognized arguments: {args}; fix: see `tmin COMMAND --help` for the options a command takes"),
    (re.compile(r"^argument (?P<arg>\S+): invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)$"),
     "argument {arg}: invalid choice {value}; fix: choose from {choices}"),
    (re.compile(r"^argument (?P<arg>\S+): invalid (?P<kind>\S+) value: (?P<value>.*)$"),
     "argument {arg}: {value} is not a valid {kind}; fix: give a {kind}"),
    (re.compile(r"^argument (?P<arg>\S+): expected one argument$"),
     "argument {arg}: expects a value; fix: write {arg} VALUE"),
    (re.compile(r"^argument (?P<arg>\S+): not allowed with argument (?P<other>\S+)$"),
     "argument {arg} cannot be used with {other}; fix: keep only one of them"),
    (re.compile(r"^the following arguments are required: (?P<args>.*)$"),
     "the following arguments are required: {args}; fix: give them (see `tmin COMMAND --help`)"),
    (re.compile(r"^ambiguous option: (?P<opt>\S+) could match (?P<matches>.*)$"),
     "ambiguous option {opt}: it could be {matches}; fix: write the option in full"),
    (re.compile(r"^argument (?P<arg>\S+): ignored explicit argument (?P<value>.*)$"),
     "argument {arg} takes no value (got {value}); fix: write {arg} alone"),
    # last: a message of our own argument types (cli/argtypes.py, already in the catalog's language) behind
    # argparse's English "argument X: " prefix
    (re.compile(r"^argument (?P<arg>\S+): (?P<message>.*)$"), "argument {arg}: {message}"),
)


def translate_argparse(message: str) -> str:
    """argparse's English error `message` in the current language (unchanged when it is none of its own)."""
    return tr_matching(message, ARGPARSE_MESSAGES)


USAGE = "usage: "
CJK_HEADING = re.compile(r"(?m)^(\S.*[\u4e00-\u9fff]):$")


class HelpFormatter(argparse.HelpFormatter):
    """`--help` in the current language: every text argparse prints (the descriptions, each option's help, the
    subcommands' one-liners, the section titles, and argparse's own "usage:", "options" and "show this help
    message and exit") is looked up in the catalog when the help is printed, so the parsers are declared in
    English once; lines wrap by terminal columns (a CJK character takes two)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return tr(action.help) if action.help else action.help

    def start_section(self, heading: str | None) -> None:
        super().start_section(tr(heading) if heading else heading)

    def add_text(self, text: str | None) -> None:
        super().add_text(tr(text) if text and text is not argparse.SUPPRESS else text)

    def add_usage(self, usage, actions, groups, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, USAGE if prefix is None else prefix)

    def format_help(self) -> str:
        text = super().format_help()
        if text.startswith(USAGE):  # the translated prefix, padded to the English one's columns (the indent)
            text = pad(tr(USAGE), len(USAGE)) + text[len(USAGE):]
        return CJK_HEADING.sub("\\1：", text)  # a translated section title ends in a full-width colon

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in wrap(text, width - len(indent)))


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors and help go through the catalog (its subcommands' parsers are of this class
    too, with its HelpFormatter)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.print_usage(sys.stderr)
        print(tr("error: {message}").format(message=translate_argparse(message)), file=sys.stderr)
        sys.exit(2)
