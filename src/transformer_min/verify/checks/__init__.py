"""Importing this package registers every check; the order of imports is the order of stages."""

from transformer_min.verify.checks import (  # noqa: F401
    attention,
    multihead,
    positional,
    position_variants,
    layers,
    full,
    scaling,
    architecture,
    masking,
    ffn,
    embeddings,
    regularization,
    training,
    decoding,
    table3,
    table1,
    arithmetic,
)
