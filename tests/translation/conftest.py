"""The small parallel corpus and its config, shared with tests/data (tests never read ../shared)."""

from tests.data.conftest import corpus, data_config  # noqa: F401  (fixtures)
