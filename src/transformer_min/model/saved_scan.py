"""Why a file is not a checkpoint we load, told without loading it: its pickles are read opcode by opcode.

`torch.load(weights_only=True)` refuses pickled code, but its message advises turning the check off;
`diagnose` says instead what the file is (empty, cut short, text, a plain pickle, or code) and names
the code it would have run.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
import zlib
from pathlib import Path

from transformer_min.core.i18n import tr
from transformer_min.core.messages import reason_without_advice, shorten


def pickled_globals(data: bytes) -> list[str]:
    """Every `module.name` the pickles in `data` would import (GLOBAL and STACK_GLOBAL), found by
    reading their opcodes with pickletools: nothing is imported or executed. Only pickles read whole
    (up to STOP) count, so text that merely starts like an opcode names nothing."""
    found, stream = [], io.BytesIO(data)
    while stream.tell() < len(data):  # a legacy torch.save file is several pickles in a row
        current, memo, pushed = [], {}, []
        try:
            for op, arg, _ in pickletools.genops(stream):
                if op.name == "GLOBAL":
                    module, _, name = str(arg).partition(" ")
                    current.append(f"{module}.{name}")
                    pushed.append(None)
                elif op.name == "STACK_GLOBAL":
                    module, name = (pushed[-2], pushed[-1]) if len(pushed) >= 2 else ("?", "?")
                    current.append(f"{module}.{name}")
                    pushed.append(None)
                elif "UNICODE" in op.name or "STRING" in op.name:
                    pushed.append(arg)
                elif op.name == "MEMOIZE":
                    memo[len(memo)] = pushed[-1] if pushed else None
                elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                    memo[arg] = pushed[-1] if pushed else None
                elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                    pushed.append(memo.get(arg))
                else:
                    pushed.append(None)
        except Exception:  # a cut pickle, or bytes that are no pickle: nothing more to read
            break
        found += current
    return found


def code_globals(names: list[str]) -> list[str]:
    """The globals torch.load(weights_only=True) would refuse: pickled code, not tensors and containers."""
    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        allowed = set(_get_allowed_globals())
    except Exception:  # pragma: no cover - a torch without the private helper
        allowed = set()
    out = []
    for n in names:
        module, _, name = n.rpartition(".")
        if n in allowed or (module == "torch" and name.endswith("Storage")) or (not allowed and module.startswith("torch")):
            continue
        out.append(("os." + name) if module in ("posix", "nt") else n)
    return out


def diagnose(path: Path, error: Exception) -> str:
    """Why `path` could not be loaded, in the user's terms (never torch's advice to drop weights_only)."""
    size = path.stat().st_size
    if size == 0:
        return tr("the file is empty (0 bytes), not a checkpoint")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04":  # torch.save's zip format
        try:
            with zipfile.ZipFile(path) as z:
                pkl = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
                pickle_bytes = z.read(pkl[0]) if pkl else b""
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, KeyError):
            return tr("the file is truncated or damaged (a torch.save file of {size} bytes cut short)").format(size=size)
    else:  # a bare pickle (any protocol), a legacy torch.save, or something else
        pickle_bytes = path.read_bytes()
    code = code_globals(pickled_globals(pickle_bytes))
    if code:
        return tr("refusing: the file holds pickled code (`{name}`); it was not loaded").format(name=code[0])
    if head == b"PK\x03\x04":
        return tr("the file is damaged ({reason})").format(reason=shorten(reason_without_advice(error), 160))
    if head[:1] == b"\x80":
        return tr("not a checkpoint (a pickle that is not a torch.save file of tensors)")
    sample = path.read_bytes()[:400]
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return tr("not a checkpoint (unrecognised binary content)")
    return tr("not a checkpoint (a text file; it starts {start!r})").format(start=shorten(text, 60))
