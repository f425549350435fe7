"""torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK), read before any process group: a malformed one is one
clear line naming the variable and the fix, never a traceback (issue 38, item 7)."""

from __future__ import annotations

import pytest

from transformer_min.core.distributed import env_world
from transformer_min.core.errors import ConfigError


@pytest.mark.parametrize("env, name", [
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two'"), ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
    ({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK='-1'"), ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK='2'"),
    ({"WORLD_SIZE": "2", "RANK": "one"}, "RANK='one'"), ({"RANK": "1"}, "RANK='1'"),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
])
def test_a_malformed_torchrun_variable_is_refused_naming_it(env, name):
    with pytest.raises(ConfigError) as e:
        env_world(env)
    assert str(e.value).startswith(f"environment variable {name} is not an integer") and "torchrun" in str(e.value)


def test_torchrun_variables_that_agree_are_read():
    assert env_world({}).world_size == 1 and env_world({"RANK": "", "WORLD_SIZE": ""}).rank == 0
    info = env_world({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"})
    assert (info.rank, info.world_size, info.local_rank) == (3, 4, 1)
