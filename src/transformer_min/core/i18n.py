"""The message catalog: `tmin verify --lang zh` and `tmin report --lang zh` in Chinese (stdlib gettext).

The catalog source is `locale/<lang>/LC_MESSAGES/tmin.po` inside the package (package data). `compile_po`
is the msgfmt step: it turns the .po text into GNU .mo bytes in memory, which `gettext.GNUTranslations`
reads, so a fresh `pip install -e .` (or a wheel) needs no build step and no writable package folder.

The language comes from `--lang`, then settings.json "language", then the locale (LC_ALL, LC_MESSAGES,
LANG starting with "zh"), else English. Messages are English msgids; an untranslated one prints in English.
"""

from __future__ import annotations

import ast
import gettext
import io
import os
import re
import struct
from functools import lru_cache
from importlib import resources
from typing import Mapping

from transformer_min.core.errors import ConfigError

DOMAIN = "tmin"
LANGUAGES = ("en", "zh")
LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG")  # POSIX precedence: the first one set decides

_current: gettext.NullTranslations = gettext.NullTranslations()
_language = "en"


def tr_matching(message: str, table) -> str:
    """A library's fixed English `message` (argparse's, tomllib's) in the current language: the first
    (regex, msgid) of `table` whose regex matches the whole message renders its msgid with the named groups;
    a message that none matches is returned as it is."""
    for pattern, text in table:
        m = re.fullmatch(pattern, message)
        if m:
            return tr(text).format(**m.groupdict())
    return message


def check_language(value: str, where: str) -> str:
    """'en' or 'zh' from a language tag ('zh', 'zh-CN', 'zh_TW', 'EN'); ConfigError naming `where` otherwise."""
    primary = str(value).strip().lower().replace("_", "-").split("-")[0]
    if primary in LANGUAGES:
        return primary
    raise ConfigError(tr("{where}: language {value} is not one of {languages}; fix: --lang zh or --lang en").format(
        where=where, value=repr(value), languages=", ".join(LANGUAGES)))


def locale_language(env: Mapping[str, str]) -> str:
    """'zh' when the first set of LC_ALL, LC_MESSAGES, LANG starts with 'zh', else 'en'."""
    for var in LOCALE_VARS:
        if env.get(var):
            return "zh" if env[var].lower().startswith("zh") else "en"
    return "en"


def resolve_language(flag: str | None, settings_language: str | None, env: Mapping[str, str] | None = None) -> str:
    """--lang, then settings.json "language", then the locale."""
    if flag:
        return check_language(flag, "--lang")
    if settings_language:
        return check_language(settings_language, "settings.json language")
    return locale_language(os.environ if env is None else env)


def _unquote(line: str) -> str:
    return ast.literal_eval(line)  # a .po string is a C string literal; Python's literal reads the escapes we use


def parse_po(text: str) -> dict[str, str]:
    """{msgid: msgstr} of a .po file (msgid/msgstr with continuation lines; the header has msgid "")."""
    messages: dict[str, str] = {}
    key, parts, current = None, {"msgid": [], "msgstr": []}, None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("msgid ", "msgstr ")):
            key, _, rest = line.partition(" ")
            if key == "msgid" and current is not None:
                messages["".join(current["msgid"])] = "".join(current["msgstr"])
            if key == "msgid":
                current = {"msgid": [], "msgstr": []}
            current[key].append(_unquote(rest))
        elif line.startswith('"') and current is not None and key:
            current[key].append(_unquote(line))
        else:
            raise ValueError(f"tmin.po line {lineno}: cannot read {raw!r}")
    if current is not None:
        messages["".join(current["msgid"])] = "".join(current["msgstr"])
    return messages


def compile_po(text: str) -> bytes:
    """The msgfmt step: .po text -> GNU .mo bytes (untranslated entries are left out, as msgfmt does)."""
    messages = {k: v for k, v in parse_po(text).items() if v}
    ids = sorted(messages)
    keys = [k.encode("utf-8") for k in ids]
    values = [messages[k].encode("utf-8") for k in ids]
    header = 7 * 4
    key_table = header
    value_table = key_table + 8 * len(ids)
    offset = value_table + 8 * len(ids)
    key_entries, blob = [], b""
    for k in keys:
        key_entries += [len(k), offset + len(blob)]
        blob += k + b"\0"
    value_entries = []
    for v in values:
        value_entries += [len(v), offset + len(blob)]
        blob += v + b"\0"
    out = struct.pack("<7I", 0x950412DE, 0, len(ids), key_table, value_table, 0, 0)
    out += struct.pack(f"<{len(key_entries)}I", *key_entries)
    out += struct.pack(f"<{len(value_entries)}I", *value_entries)
    return out + blob


def po_text(lang: str) -> str:
    """The shipped catalog source for `lang` (package data)."""
    return resources.files("transformer_min.core").joinpath(f"locale/{lang}/LC_MESSAGES/{DOMAIN}.po").read_text("utf-8")


@lru_cache(maxsize=None)
def translations(lang: str) -> gettext.NullTranslations:
    if lang == "en":
        return gettext.NullTranslations()
    return gettext.GNUTranslations(io.BytesIO(compile_po(po_text(lang))))


def set_language(lang: str) -> None:
    """Switch every later `tr()` to `lang` ('en' or 'zh')."""
    global _current, _language
    _language = check_language(lang, "language")
    _current = translations(_language)


def language() -> str:
    return _language


def tr(message: str) -> str:
    """The message in the current language (the English msgid when untranslated)."""
    return _current.gettext(message)


def claim(text: str) -> str:
    """A claim in the current language; in Chinese the paper's English stays beside it, quoted."""
    translated = tr(text)
    return text if translated == text else f'{translated} ("{text}")'


def add_lang_option(parser) -> None:
    """`--lang zh|en`, one of the options every command takes (cli.main.common_options)."""
    parser.add_argument("--lang", metavar="LANG", type=str.lower,
                        help="zh or en: messages, errors, labels and verdicts in that language (default: "
                             "settings.json \"language\", then the locale LANG)")


def _option_value(argv: list[str], name: str) -> str | None:
    """The last value of `--name X` / `--name=X` in argv (None when absent), read before argparse runs."""
    value = None
    for i, item in enumerate(argv):
        if item == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif item.startswith(name + "="):
            value = item.partition("=")[2]
    return value


def _settings_language(path: str) -> str | None:
    """settings.json "language" read leniently (a broken file is reported later, by the settings loader)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    value = data.get("language") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def check_lang_option(argv: list[str]) -> None:
    """A ConfigError naming a bad `--lang` value of the command line before it is parsed: `--help` exits while
    parsing, before the command would report it, and would otherwise print in the fallback language silently."""
    value = _option_value(argv, "--lang")
    if value is not None:
        check_language(value, "--lang")


def prescan_language(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    """The language of a command line before it is parsed: --lang, then settings.json "language" (--settings or
    ./settings.json), then the locale; a bad value falls back to the next source (it is reported once parsed)."""
    env = os.environ if env is None else env
    for source in (_option_value(argv, "--lang"),
                   _settings_language(_option_value(argv, "--settings") or "settings.json")):
        if source:
            try:
                return check_language(source, "--lang")
            except ConfigError:
                continue
    return locale_language(env)
