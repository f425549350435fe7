"""`tmin verify --llm`: ask the model to review the attention weights that the local checks printed.

The review is advisory: the local checks stay the authority, and the model's words never turn a FAIL into a PASS.
"""

from __future__ import annotations

from typing import Any, Mapping

from transformer_min.channel.client import ChannelClient
from transformer_min.channel.schema import ChannelPart
from transformer_min.channel.settings import KEY_FIX, MissingKeyError, resolve_channel
from transformer_min.core.errors import ChannelError, TminError
from transformer_min.core.i18n import tr

HEADING = "== LLM review (advisory; local checks are the authority) =="
MAX_ROWS = 16  # head-0 rows and columns sent: as many as `tmin verify` prints (verify.printing.MAX_SHOWN)
MAX_ITEMS = 16
REVIEW_MAX_TOKENS = 300
SYSTEM = (
    "You review numerical checks of scaled dot-product attention, 'Attention Is All You Need' section 3.2.1, "
    "eq. (1): Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V. Be brief and concrete."
)


def _numbers(values: Any, limit: int = MAX_ITEMS) -> str:
    """A compact list: rounded floats, cut after `limit` items."""
    if not isinstance(values, (list, tuple)):
        return "n/a"
    shown = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in values[:limit]]
    more = f", … ({len(values) - limit} more)" if len(values) > limit else ""
    return "[" + ", ".join(shown) + more + "]"


def build_prompt(summary: Mapping[str, Any]) -> str:
    """The user prompt, in the current language (i18n): what was printed (source, shape, row sums, head 0 cut to
    MAX_ROWS), the entropy per head and the local verdict."""
    head0 = summary.get("head0") or []
    total_rows = max(summary.get("head0_rows", len(head0)), len(head0))
    rows = "\n".join("  " + _numbers(row, MAX_ROWS) for row in head0[:MAX_ROWS])
    if total_rows > MAX_ROWS:
        rows += "\n  " + tr("… ({n} more rows)").format(n=total_rows - MAX_ROWS)
    source = f"{summary['source']}\n" if summary.get("source") else ""
    return (
        source
        + tr("Local verdict (authoritative): {verdict}").format(verdict=summary.get("local_verdict", "n/a")) + "\n"
        + tr("Attention weights shape: {shape}").format(shape=_numbers(summary.get("shape"))) + "\n"
        + tr("Row sums (each should be 1): {sums}").format(sums=_numbers(summary.get("row_sums"))) + "\n"
        + tr("Entropy per head (nats): {entropy}").format(entropy=_numbers(summary.get("entropy_per_head"))) + "\n"
        + tr("Head 0 weights (rounded):") + f"\n{rows or '  n/a'}\n"
        + tr("In at most 5 lines: do these look like valid softmax attention weights (non-negative, rows summing "
             "to 1, any causal or padding pattern, heads not collapsed)? Start with PLAUSIBLE or SUSPICIOUS.")
    )


def in_user_language(system: str) -> str:
    """A system prompt plus the answer language (the user's: `--lang`, settings.json "language" or the locale)."""
    return f"{system} {tr('Answer in English.')}"


def system_prompt() -> str:
    """SYSTEM in the user's language (`tmin verify --llm`)."""
    return in_user_language(SYSTEM)


def review_attention(summary: Mapping[str, Any], *, channel: ChannelPart) -> tuple[str, str]:
    """Ask the model to review `summary`; return (status, text) and never raise for channel problems.

    status "skipped": no key configured, text says how to set one; "ok": text is the model's verdict;
    "error": text is one readable error line. `channel` is the loaded project's channel part.
    """
    try:
        settings = resolve_channel(channel)
    except MissingKeyError as exc:
        if exc.none_set:  # none set anywhere
            return "skipped", tr("LLM review skipped: no key configured; to enable it, {fix} (see docs/channel.md)"
                                 ).format(fix=tr(KEY_FIX))
        # a placeholder from the posts, an empty key, or a key in a git-tracked file: say which, and where
        return "skipped", tr("LLM review skipped: {reason} (see docs/channel.md)").format(reason=exc)
    except TminError as exc:
        return "error", tr("LLM review failed: {error}").format(error=exc)
    try:
        reply = ChannelClient(settings).complete(build_prompt(summary), system=system_prompt(),
                                                 max_tokens=REVIEW_MAX_TOKENS)
    except ChannelError as exc:
        return "error", tr("LLM review failed: {error}").format(error=exc)
    text = reply.text.strip() or tr("(the model returned an empty review)")
    if summary.get("local_verdict") == "FAIL":
        text += "\n" + tr("(The local verdict FAIL stands whatever the model says.)")
    return "ok", text


def format_review(status: str, text: str) -> str:
    """Render a review for `tmin verify --llm`: one line when skipped, else the heading and the text."""
    if status == "skipped":
        return text
    return f"{tr(HEADING)}\n{text}"
