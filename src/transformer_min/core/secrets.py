"""The one redaction point: a configured key is never shown in full, wherever it came from.

`redact` is the only form a key is ever shown in (`sk-…abcd`). `remember` seeds the keys this process knows
(the loader calls it for every source: the environment, settings.json, config.toml, config.local.toml, --set,
a CLI flag); `scrub_known` replaces each of them, and anything that reads like an API key (`sk-` and 12 or
more key characters), in a text. The output boundary applies it: `ScrubbingStream` around stdout and stderr
while `tmin` runs, `SecretFilter` on every log handler, and the CLI's error printer. So a key that slips into
a message, a log line or an exception is still cut before it is written.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable

# What reads like a key even when it was never configured (a pasted one in an argument, an echoed header).
KEY_LIKE = re.compile(r"\b(sk-)([A-Za-z0-9_\-]{8,})([A-Za-z0-9_\-]{4})\b")
KEY_ENV_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")  # the SDKs' own; a channel section adds its names
MIN_SECRET = 4  # shorter strings are not scrubbed by value (they would match ordinary text)
# What reads like a placeholder from the posts ("你的…", "YOUR_…KEY", "<key>"): named in messages, never a secret.
PLACEHOLDER_RE = re.compile(r"你的|^(sk-)?(your|my)[-_ ]?\w*key$|^<.*>$|^sk-x+$", re.IGNORECASE)

_known: set[str] = set()


def redact(key: str | None) -> str:
    """Show at most the first 3 and last 4 characters of a key (`sk-…abcd`); short keys are fully hidden."""
    key = (key or "").strip()
    if not key:
        return "(none)"
    if len(key) < 12:
        return "****"
    return f"{key[:3]}…{key[-4:]}"


def scrub(text: str, key: str | None) -> str:
    """Replace every occurrence of `key` (raw or stripped) in `text` with its redacted form."""
    for variant in sorted({key or "", (key or "").strip()}, key=len, reverse=True):
        if len(variant) >= MIN_SECRET:
            text = text.replace(variant, redact(variant))
    return text


def remember(*keys: str | None) -> None:
    """Add configured keys to the ones every output of this process is scrubbed of."""
    for key in keys:
        if isinstance(key, str) and len(key.strip()) >= MIN_SECRET and not PLACEHOLDER_RE.search(key.strip()):
            _known.add(key.strip())


def remember_environment(names: Iterable[str] = (), env=None) -> None:
    """The keys in the environment: the SDKs' variables and `names` (those a section declares for its key)."""
    env = os.environ if env is None else env
    remember(*(env.get(name) for name in (*KEY_ENV_VARS, *names)))


def remember_arguments(argv: Iterable[str]) -> None:
    """Keys given on the command line: `--set SECTION.api_key=KEY` (also `api-key`), `--api-key KEY`."""
    items = list(argv)
    for i, item in enumerate(items):
        path, eq, value = item.partition("=")
        if eq and path.strip().lower().replace("-", "_").endswith("api_key"):
            remember(value.strip().strip("'\""))
        if item in ("--api-key", "--key") and i + 1 < len(items):
            remember(items[i + 1])


def forget_all() -> None:
    """Drop the remembered keys (tests; one process running several commands)."""
    _known.clear()


def scrub_known(text: str) -> str:
    """`text` with every remembered key and every key-like `sk-...` token redacted."""
    if not isinstance(text, str) or not text:
        return text
    for key in sorted(_known, key=len, reverse=True):
        if key in text:
            text = scrub(text, key)
    return KEY_LIKE.sub(lambda m: m.group(0) if PLACEHOLDER_RE.search(m.group(0)) else redact(m.group(0)), text)


class SecretFilter(logging.Filter):
    """A logging filter that scrubs the formatted message (and its arguments) of keys."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it itself
            return True
        clean = scrub_known(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_text:
            record.exc_text = scrub_known(record.exc_text)
        return True


class ScrubbingStream:
    """A text stream that writes through `inner` with keys scrubbed (stdout and stderr while tmin runs)."""

    def __init__(self, inner):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(scrub_known(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
