"""CLI glue: `tmin channel check`, `tmin channel models` and `tmin ask QUESTION`.

Handlers return an exit code and raise ChannelError (exit code 3) for every failure; `tmin`'s main prints it as
one `error: ...` line.
"""

from __future__ import annotations

import argparse
import logging

from transformer_min.cli.argtypes import positive_int
from transformer_min.channel.client import DEFAULT_MAX_TOKENS, ChannelClient, ChannelRequestError, endpoint_url
from transformer_min.channel.review import in_user_language
from transformer_min.channel.schema import channel_part
from transformer_min.channel.settings import ChannelConfigError, ChannelSettings, resolve_channel
from transformer_min.cli.common import project_of
from transformer_min.core.i18n import tr
from transformer_min.core.textwidth import pad

log = logging.getLogger(__name__)

CHECK_PROMPT = "Reply with the single word: pong"
CHECK_MAX_TOKENS = 32
LABEL = 9  # the label column of `channel check`, in terminal columns (the result lines are aligned in the catalog)
DEFAULT_SYSTEM = (
    "You help a reader of 'Attention Is All You Need' (Vaswani et al., 2017). "
    "Answer concisely and cite the paper's sections and equations."
)
SUSPECTS = {
    "api_key": "the key",
    "model": "the model name",
    "base_url": "base_url (or the proxy variables)",
    "timeout": "the timeout or the network",
    "reply": "base_url or protocol (the reply is not the protocol's JSON)",
    "server": "nothing on your side: the gateway is failing",
    "rate_limit": "nothing on your side: rate limited",
}


def add_parsers(subparsers: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Register `channel check` and `ask` on the main CLI's subparsers; `parents` carry --config/--settings/--log-level.

    The common options go on the leaf parsers (`check`, `ask`): give them after the subcommand,
    `tmin channel check --config x.toml`.
    """
    channel = subparsers.add_parser(
        "channel", help="check the LLM channel (an OpenAI/Anthropic gateway such as TaoToken)",
        description="The LLM channel: a gateway speaking the OpenAI or Anthropic protocol. See docs/channel.md.",
    )
    channel_commands = channel.add_subparsers(dest="channel_command", metavar="COMMAND", required=True)
    check = channel_commands.add_parser(
        "check", parents=parents, help="send one minimal request; report base_url, key, model, latency and reply",
    )
    check.set_defaults(func=run_check, needs_config=False)
    models = channel_commands.add_parser(
        "models", parents=parents,
        help="list the models the gateway offers (GET /v1/models), the configured one marked with *",
    )
    models.set_defaults(func=run_models, needs_config=False)

    ask = subparsers.add_parser("ask", parents=parents, help="ask the configured model a question about the paper")
    ask.add_argument("question", metavar="QUESTION", help='e.g. "Why does eq. (1) divide by sqrt(d_k)?"')
    ask.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS,
                     help="longest answer in tokens (default %(default)s)")
    ask.add_argument("--system", default=DEFAULT_SYSTEM,
                     help="system prompt ('' for none); unless none, it also asks for the answer in the --lang language")
    ask.set_defaults(func=run_ask, needs_config=False)


def settings_from_args(args: argparse.Namespace) -> ChannelSettings:
    """The channel's part of the command's project (--config/--settings/--set, TMIN_CONFIG, ./config.toml,
    ./settings.json, the environment), resolved and with the key checked."""
    return resolve_channel(channel_part(project_of(args)))


def run_check(args: argparse.Namespace) -> int:
    """Send one minimal request and say which of base_url, key and model is wrong, or show latency and reply."""
    settings = settings_from_args(args)
    src = settings.sources
    rows = [(tr("channel"), endpoint_url(settings.base_url, settings.protocol), None),
            ("base_url", settings.base_url, "base_url"), (tr("protocol"), settings.protocol, "protocol"),
            (tr("key"), settings.key_hint, "api_key"), (tr("model"), settings.model, "model"),
            (tr("timeout"), f"{settings.timeout:g} s", "timeout")]
    for label, value, field in rows:  # where each value came from, "default" translated
        source = src.get(field) if field else None
        print(f"{pad(label, LABEL)} {value}" + (f"  ({tr(source)})" if source else ""))
    try:
        reply = ChannelClient(settings).complete(CHECK_PROMPT, max_tokens=CHECK_MAX_TOKENS)
    except ChannelRequestError as exc:
        print(tr("result    FAIL: check {get}").format(get=tr(SUSPECTS.get(exc.field, 'the error below'))))
        raise
    retries = f" ({reply.attempts} attempts)" if reply.attempts > 1 else ""
    print(tr("result    OK: base_url, key and model work; latency {latency_s:.2f} s{retries}").format(latency_s=reply.latency_s, retries=retries))
    print(f"{pad(tr('reply'), LABEL)} {reply.text.strip() or tr('(empty reply)')}")
    return 0


def run_ask(args: argparse.Namespace) -> int:
    """Print the model's answer to QUESTION."""
    if not args.question.strip():
        raise ChannelConfigError(tr('QUESTION is empty; fix: tmin ask "Why does eq. (1) divide by sqrt(d_k)?"'))
    settings = settings_from_args(args)
    system = in_user_language(args.system) if args.system else None  # --lang zh: the answer in Chinese
    reply = ChannelClient(settings).complete(args.question, system=system, max_tokens=args.max_tokens)
    log.debug(tr("%s answered in %.2f s"), reply.model, reply.latency_s)  # stdout is the answer alone
    print(reply.text.strip() or tr("(the model returned an empty answer)"))
    return 0


def run_models(args: argparse.Namespace) -> int:
    """List the gateway's models with the configured one marked; an error line when it is not among them."""
    settings = settings_from_args(args)
    url = endpoint_url(settings.base_url, settings.protocol, "models")
    ids = ChannelClient(settings).list_models()
    print(tr("models    {url}  ({protocol}, key {key_hint})").format(url=url, protocol=settings.protocol, key_hint=settings.key_hint))
    for model_id in sorted(ids):
        mark = "*" if model_id == settings.model else " "
        note = "  <- " + tr("configured ({source})").format(source=settings.sources.get("model")) \
            if model_id == settings.model else ""
        print(f"  {mark} {model_id}{note}")
    print(tr("{n} models").format(n=len(ids)))
    if settings.model not in ids:
        raise ChannelConfigError(
            tr("the configured model '{model}' (from {get}) is not among the {n_ids} models this gateway lists; fix: set model (settings.json, [taotoken] or TMIN_MODEL) to one of them").format(model=settings.model, get=settings.sources.get('model'), n_ids=len(ids)),
            field="model",
        )
    return 0
