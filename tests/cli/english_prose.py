"""A detector of English prose in output that should be Chinese (`--lang zh`), for the tests of issue 24.

Code, paths, key names, numbers, shapes and quoted text (the paper's own words kept beside a translated claim,
a value the user typed) are not prose: they are stripped first. What is left is prose when it holds three or
more English words in a row (words separated only by spaces and light punctuation, not by Chinese text).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Tokens that are names, not prose: verdict words, units, tags and the paper's symbols.
KNOWN = {
    "PASS", "FAIL", "SKIP", "EXACT", "STAT", "ARCH", "ARITH", "CPU", "GPU", "GPUs", "CUDA", "MPS", "LLM", "API",
    "JSON", "TOML", "CSV", "HTTP", "HTTPS", "URL", "BLEU", "NaN", "NumPy", "PyTorch", "torch", "numpy", "softmax",
    "ReLU", "FFN", "FLOPs", "BPE", "GB", "MB", "KB", "TaoToken", "Anthropic", "OpenAI", "Multi30k", "WMT", "fp32",
    "fp16", "bf16", "tf32", "TF32", "AMP", "DDP", "query", "key", "value", "Q", "K", "V", "base", "big", "vs",
    "sinusoidal", "learned", "rope", "relative", "post", "pre", "httpx", "pip", "tmin", "verify", "doctor",
    "channel", "check", "report", "train", "translate", "explore", "export", "eval", "decode", "average", "data",
    "zh", "en", "Transformer", "Adam", "Python", "Linux", "macOS", "Windows", "ONNX", "CTranslate2", "SDPA",
    "kernel", "flash", "math", "heads", "head", "model", "max_len", "seq_len", "d_model", "n", "d", "h", "k", "x",
    "ok", "OK", "on", "off", "true", "false", "none", "None", "True", "False", "null", "INFO", "DEBUG", "WARNING",
    "ERROR", "sec", "ms", "s", "it", "e", "i", "N", "L", "B", "T", "S", "H", "D", "MiB", "GiB", "cuda", "cpu",
    "mps", "auto", "bleu", "sacrebleu", "mask", "masks", "dropout", "token", "tokens", "batch", "GNU", "BOS", "EOS",
    "PAD", "UNK", "UTF", "LANG", "LC_ALL", "shape", "shapes", "dtype", "ASCII", "Table", "row", "rows", "eq",
    "Su", "et", "al", "Shaw", "Vaswani", "Press", "Wolf", "Ba", "Kingma", "Szegedy", "He", "Hinton",
}

_STRIP = [
    re.compile(r"`[^`]*`"),                       # `code`
    re.compile(r'"[^"]*"'),                       # "quoted" (the paper's words, a typed value)
    re.compile(r"(?<![A-Za-z])'[^']*'"),          # 'quoted'
    re.compile(r"“[^”]*”|「[^」]*」|‘[^’]*’|《[^》]*》"),  # Chinese quotes (and title marks) around English
    re.compile(r"https?://\S+"),                   # URLs
    re.compile(r"(?:[~.\w-]*/)+[\w.*<>-]*"),       # paths (a/b, ./x, /tmp/y)
    re.compile(r"\b[\w-]+\.(?:toml|json|csv|py|pt|txt|md|log|html|svg|png|mo|po|sh|yaml)\b"),  # file names
    re.compile(r"--?[a-z][\w-]*(?:[= ][^\s，。；：,;]*)?"),  # --flags (and their value)
    re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\]]*\])+(?:\(\))?"),  # key.names, module.func, a[0]
    re.compile(r"\b\w*_\w*\b"),                    # snake_case identifiers
    re.compile(r"\b[A-Za-z]+\d[\w]*\b"),          # d_k-like names with digits (h8, fp32, W1)
    re.compile(r"\b[a-z]+[A-Z]\w*\b"),            # camelCase
    re.compile(r"\[[^\]\u4e00-\u9fff]*\]"),       # [section] headers, [PASS]
    re.compile(r"\([^()\u4e00-\u9fff]*\)"),       # (shapes, 3.2.1, a formula) with no Chinese in it
    re.compile(r"[<>{}=+*/^|~$#@%&\\-]+"),        # operators
    re.compile(r"\d[\d.,:eE+-]*"),                 # numbers
]
_WORD = re.compile(r"[A-Za-z][A-Za-z']*")
# Characters that break a run of English words: Chinese text and Chinese punctuation.
_BREAK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+")


def strip_code(line: str) -> str:
    for pattern in _STRIP:
        line = pattern.sub(" | ", line)
    return line


def english_run(line: str) -> str | None:
    """The first run of >= 3 consecutive English prose words left after stripping code, or None."""
    for chunk in _BREAK.split(strip_code(line)):
        for piece in re.split(r"[|;:!?()\[\]]", chunk):
            run: list[str] = []
            for token in piece.split():
                word = token.strip(".,'")
                if word in KNOWN or (word.isupper() and len(word) > 1):
                    continue  # a name: neither prose nor a break
                if _WORD.fullmatch(word):
                    run.append(word)
                    if len(run) >= 3:
                        return " ".join(run)
                elif word:
                    run = []
    return None


def prose_lines(text: str) -> list[str]:
    """The output lines that carry English prose."""
    return [line for line in text.splitlines() if english_run(line)]


def prose_share(text: str) -> tuple[int, int]:
    """(lines with English prose, non-empty lines)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return sum(1 for line in lines if english_run(line)), len(lines)


class _VisibleText(HTMLParser):
    """The text of an HTML page a reader sees: text outside <script> and <style>, and the attributes a browser
    shows (title, placeholder, alt, aria-label), one item per text node or attribute."""

    SHOWN = ("title", "placeholder", "alt", "aria-label")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.items: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.hidden += 1
        self.items += [value for name, value in attrs if name in self.SHOWN and value]

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.hidden -= 1

    def handle_data(self, data):
        if not self.hidden and data.strip():
            self.items.append(" ".join(data.split()))


def html_visible_text(html: str) -> str:
    """The visible text of an HTML page, one text node (or shown attribute) per line, for `prose_lines`."""
    parser = _VisibleText()
    parser.feed(html)
    parser.close()
    return "\n".join(parser.items)
