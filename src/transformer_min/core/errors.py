"""Error hierarchy: every user-facing failure is one of these; cli.main turns it into one line + exit code."""


class TminError(Exception):
    """Base class for errors shown to the user as one readable line."""

    exit_code = 2


class ConfigError(TminError):
    """A config value, file or CLI argument is invalid (message names the field and the fix)."""


class CheckpointError(TminError):
    """A checkpoint is missing, corrupt or disagrees with the model."""


class DataError(TminError):
    """Input data is missing or malformed."""


class ChannelError(TminError):
    """The LLM channel failed (configuration, network or server reply)."""

    exit_code = 3


class ModelInputError(TminError, ValueError):
    """A tensor or size given to the model is out of range (token id >= vocab size, sequence > max_len,
    heads that do not divide d_model)."""
