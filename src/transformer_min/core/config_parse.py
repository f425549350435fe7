"""config.toml text, a flat JSON file of hyperparameters and `--set section.key=value` items -> canonical tables.

A canonical table has only the section's own key names: the paper-reading posts' names (`ALIASES`) are
read as ours with a note, a key whose home is settings.json (`[train] num_threads`) is moved there, and
every unknown key and section is reported at once, with the section a misplaced key belongs in or the
nearest key. The tables become dataclasses in `transformer_min.core.config`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr, tr_matching
from transformer_min.core.keys import (
    ALIASES,
    FLAT_ORDER,
    MOVED_TO_SETTINGS,
    RUNTIME_KEYS,
    SECTION_KEYS,
    SECTIONS,
    SETTINGS_SECTION,
    Sections,
    config_key_hint,
    key_homes,
    section_hint,
)
from transformer_min.core.schema import fail, hint, note, unknown_keys_error
from transformer_min.core.secrets import redact, remember
from transformer_min.core.settings import parse_json_object

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

Problems = list[tuple[str, str]]


def canonical_table(section: str, table: dict, source: str, problems: Problems, moved: dict,
                    sections: Sections = ()) -> dict:
    """`table` with the posts' names replaced by ours (with a note); a key whose home is settings.json goes to
    `moved`; unknown keys go to `problems`. `sections`: the registered sections (`core.sections`)."""
    extra = {s.name: s for s in sections}
    aliases = extra[section].aliases if section in extra else ALIASES.get(section, {})
    known = (RUNTIME_KEYS if section == SETTINGS_SECTION
             else extra[section].fields if section in extra else SECTION_KEYS[section])
    out = {}
    for key, value in table.items():
        if key in known:
            out[key] = value
        elif key in MOVED_TO_SETTINGS.get(section, {}):
            home = MOVED_TO_SETTINGS[section][key]
            moved[home] = (value, f"{section}.{key}")
            if source not in ("dict", "--set") and not source.startswith("checkpoint "):  # runs saved it there
                note(tr("{source}: [{section}] {key} read as settings.json {home} (its one home; move it there to "
                        "silence this note)").format(source=source, section=section, key=key, home=home))
        elif key in aliases:
            canonical = aliases[key]
            if canonical in table and table[canonical] != value:
                problems.append((tr("{section}.{key}: another name for {section}.{canonical}, which is also set").format(
                    section=section, key=key, canonical=canonical), tr("keep only {canonical}").format(canonical=canonical)))
                continue
            note(tr("{source}: [{section}] {key} read as {canonical} (tmin's name; rename it to silence this note)"
                    ).format(source=source, section=section, key=key, canonical=canonical))
            out[canonical] = value
        else:
            problems.append((tr("{section}.{key}: unknown key").format(section=section, key=key), config_key_hint(section, key, sections)))
    return out


def canonical_sections(data: dict, source: str, moved: dict, sections: Sections = ()) -> dict[str, dict]:
    """A parsed config (nested dict) as canonical tables; every unknown key and section in one error."""
    problems: Problems = []
    tables: dict[str, dict] = {}
    for name, value in data.items():
        if name == "source" and (source == "dict" or source.startswith("checkpoint ")):  # Config's own field
            continue
        if name not in SECTIONS and name not in {s.name for s in sections}:
            homes = key_homes(name)
            if homes and not isinstance(value, dict):
                problems.append((tr("{name}: a key outside any table").format(name=name),
                                 tr("it belongs in {sections}; move it there").format(
                                     sections=tr(" or ").join(f"[{h}]" for h in homes))))
            else:
                problems.append((tr("{name}: unknown section").format(name=name), section_hint(name, sections)))
            continue
        if not isinstance(value, dict):
            raise fail(name, tr("expected a table [{name}], got {value!r}").format(name=name, value=value))
        tables[name] = canonical_table(name, value, source, problems, moved, sections)
    if problems:
        raise unknown_keys_error("", problems)
    return tables


def flat_to_sections(data: dict, source: str, sections: Sections = ()) -> dict:
    """A flat dict of hyperparameters (post 003's JSON: {"d_model": 512, "warmup_steps": 4000, ...}) as
    config sections: each key goes to the first section of FLAT_ORDER that has it (or an alias of it).
    Tables ({"model": {...}}) pass through. Says where each key went in one note."""
    nested: dict[str, dict] = {}
    placed: dict[str, list[str]] = {}
    problems: Problems = []
    for key, value in data.items():
        if isinstance(value, dict) and (key in SECTIONS or key in {s.name for s in sections}):
            nested.setdefault(key, {}).update(value)
            continue
        homes = key_homes(key)
        if not homes:
            if key in (*RUNTIME_KEYS, *(k for s in sections for k in s.settings_names())):  # a settings.json
                fix = tr("it is a settings.json key: pass that file with --settings, not --config / TMIN_CONFIG")
            else:
                fix = hint(key, sorted({k for n in FLAT_ORDER for k in SECTION_KEYS[n]}))
            problems.append((tr("'{key}': unknown key").format(key=key), fix))
            continue
        nested.setdefault(homes[0], {})[key] = value
        placed.setdefault(homes[0], []).append(key)
    if problems:
        raise unknown_keys_error("", problems)
    if placed:
        note(tr("{source} is a flat list of hyperparameters; read as {placement}").format(
            source=source, placement="; ".join(f"[{section}] {', '.join(keys)}" for section, keys in placed.items())))
    free_flat_head_dims(nested.get("model", {}), source)
    return nested


def free_flat_head_dims(model: dict, source: str) -> None:
    """A flat file writes d_k and d_v out (post 003: d_k = d_v = d_model / h = 64). Changing num_heads or d_model
    there leaves them behind: keep them as written, as [attention] does, with a note (Table 3 rows A and B),
    instead of refusing; in a TOML [model] table that still takes free_head_dims = true."""
    if "free_head_dims" in model:
        return
    d_model = model.get("d_model", 512)
    heads = model.get("num_heads", model.get("n_heads", 8))
    off = [(name, model[name]) for name in ("d_k", "d_v")
           if all(type(v) is int and v > 0 for v in (model.get(name), d_model, heads))
           and model[name] * heads != d_model]
    if off:
        model["free_head_dims"] = True
        note(tr("{source}: {products} != d_model {d_model}: kept as written (model.free_head_dims), not the "
                "paper's d_model / h (section 3.2.2), as in Table 3 rows A and B; remove d_k and d_v to get "
                "d_model / num_heads").format(
            source=source, d_model=d_model,
            products=", ".join(f"num_heads * {name} = {heads} * {value} = {heads * value}" for name, value in off)))


# tomllib's (and tomli's) reasons, matched and rendered through the catalog; one it does not know stays as it is
TOML_REASONS = (
    (r"Expected '=' after a key in a key/value pair", "expected '=' after a key (key = value)"),
    (r"Expected newline or end of document after a statement", "expected a new line after the value"),
    (r"Expected '\]' at the end of a table declaration", "expected ']' at the end of the [section] line"),
    (r"Expected '\]\]' at the end of an array declaration", "expected ']]' at the end of the [[array]] line"),
    (r"Invalid value", "invalid value (a string needs \"double quotes\")"),
    (r"Invalid statement", "invalid statement"),
    (r"Invalid initial character for a key part", "a key cannot start with this character"),
    (r"Unterminated string", "the string has no closing quote"),
    (r"Unclosed array", "the array has no closing ']'"),
    (r"Unclosed inline table", "the inline table has no closing '}}'"),
    (r"Cannot declare (?P<key>.+) twice", "{key} is declared twice"),
    (r"Cannot overwrite a value", "a key is given twice"),
    (r"Illegal character (?P<char>.+)", "illegal character {char}"),
    (r"Found invalid character (?P<char>.+)", "invalid character {char}"),
    (r"Invalid date or datetime", "invalid date or time"),
)


def toml_reason(reason: str) -> str:
    """tomllib's English reason for a decode error, in the catalog's language."""
    return tr_matching(reason, TOML_REASONS)


def parse_toml(p: Path, text: str) -> dict:
    """TOML text of file `p` as a dict, or ConfigError naming the file and the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        if where is None:
            raise ConfigError(tr("{p}: invalid TOML: {e}; fix that line").format(p=p, e=e)) from None
        line = text.splitlines()[int(where.group(1)) - 1].strip() if text.splitlines() else ""
        raise ConfigError(tr("{p}: invalid TOML: line {line}, column {column} ({reason}): {text}; fix that line "
                             "(text copied from a web page often lost its '=' or quotes: key = value, strings in "
                             "\"double quotes\")").format(p=p, line=where.group(1), column=where.group(2),
                                                          reason=toml_reason(str(e)[:where.start()].strip()),
                                                          text=repr(line[:80]))) from None


def parse_config_text(p: Path, text: str, sections: Sections = ()) -> dict:
    """A config file's text as a dict: TOML, or JSON for a .json file or text that starts with '{'."""
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        data = parse_json_object(p, text, "a JSON object {...} of hyperparameters or of tables")
        return flat_to_sections(data, str(p), sections)
    return parse_toml(p, text)


SET_EXAMPLE = "e.g. --set attention.num_heads=4 or --set model.positional=rope"


def parse_set(item: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, value); the value is read as a TOML value (4, 0.5, true,
    [0.9, 0.98], "pre"), and a bare word that is not one (rope) as a string."""
    path, eq, raw = item.partition("=")
    section, dot, key = path.strip().partition(".")
    if not eq or not dot or not section or not key or "." in key:
        raise ConfigError(tr("--set {item!r}: expected SECTION.KEY=VALUE; fix: {SET_EXAMPLE}").format(item=item, SET_EXAMPLE=tr(SET_EXAMPLE)))
    raw = raw.strip()
    if not raw:
        raise ConfigError(tr('--set {item!r}: no value after \'=\'; fix: {SET_EXAMPLE} (a string may be quoted: --set model.norm=\'"pre"\')').format(item=item, SET_EXAMPLE=tr(SET_EXAMPLE)))
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word: rope, pre, cuda
    return section, key, value


def shown_item(item: str) -> str:
    """A --set item as messages may show it: the value of a key (`section.api_key=...`) redacted."""
    path, eq, raw = item.partition("=")
    if not eq or not path.strip().endswith("api_key") or not raw.strip():
        return item
    remember(raw.strip().strip("'\""))
    return f"{path}={redact(raw.strip())}"


def key_of(what: str) -> str:
    """The key path a problem starts with ("model.d_modle: unknown key"; the zh catalog writes a full-width colon)."""
    return re.split("[:\uff1a]", what, maxsplit=1)[0]


def sets_to_tables(items: list[str] | tuple[str, ...], moved: dict,
                   sections: Sections = ()) -> tuple[dict[str, dict], dict[str, str]]:
    """The --set items as canonical tables (the later of two items for one key wins) and {"section.key": item}
    for the messages; unknown sections and keys are reported like a file's, naming --set."""
    raw: dict[str, dict] = {}
    given: dict[str, str] = {}
    problems: Problems = []
    shown = [shown_item(item) for item in items]
    extra = {s.name: s for s in sections}
    for item, written in zip(shown, items):
        section, key, value = parse_set(written)
        if section not in SECTIONS and section not in extra and section != SETTINGS_SECTION:
            problems.append((tr("{section}: unknown section (--set {item})").format(section=section, item=item),
                             section_hint(section, sections)))
            continue
        raw.setdefault(section, {})[key] = value
        aliases = extra[section].aliases if section in extra else ALIASES.get(section, {})
        given[f"{section}.{aliases.get(key, key)}"] = item
    tables = {section: canonical_table(section, table, "--set", problems, moved, sections)
              for section, table in raw.items()}
    items = {path.split("=", 1)[0].strip(): path for path in shown}
    problems = [(f"{what} (--set {items[key_of(what)]})" if key_of(what) in items else what, fix)
                for what, fix in problems]
    if problems:
        raise unknown_keys_error("", problems)
    return tables, given
