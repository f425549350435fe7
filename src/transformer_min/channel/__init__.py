"""The LLM channel: one key for a gateway speaking the OpenAI and Anthropic protocols (e.g. TaoToken).

Used by `tmin channel check`, `tmin ask` and `tmin verify --llm`. It imports nothing from the model side,
and httpx only when a request is sent, so the main job runs with no key, no network and no httpx.
"""

from transformer_min.channel.client import ChannelClient, ChannelRequestError, ChatReply, endpoint_url
from transformer_min.channel.review import format_review, review_attention
from transformer_min.channel.settings import (
    ChannelConfigError,
    ChannelSettings,
    MissingKeyError,
    load_channel,
    redact,
    resolve_channel,
    resolve_paths,
)

__all__ = [
    "ChannelClient",
    "ChannelConfigError",
    "ChannelRequestError",
    "ChannelSettings",
    "ChatReply",
    "MissingKeyError",
    "endpoint_url",
    "format_review",
    "load_channel",
    "redact",
    "resolve_channel",
    "resolve_paths",
    "review_attention",
]
