from __future__ import annotations

import os
import uuid

import pytest

from qualify.serve.scoped_env import scoped_env


@pytest.mark.parametrize("before", [None, "old"])
def test_a_value_holds_inside_the_block_and_what_was_there_comes_back(before: str | None) -> None:
    name = f"QUALIFY_TEST_{uuid.uuid4().hex}"
    if before is not None:
        os.environ[name] = before
    try:
        with pytest.raises(RuntimeError), scoped_env(name, "HND"):
            assert os.environ[name] == "HND"
            raise RuntimeError  # restored on the way out of a failing block too
        assert os.environ.get(name) == before
    finally:
        os.environ.pop(name, None)


def test_none_leaves_the_variable_as_it_is() -> None:
    name = f"QUALIFY_TEST_{uuid.uuid4().hex}"
    with scoped_env(name, None):
        assert name not in os.environ
    os.environ[name] = "NHD"
    try:
        with scoped_env(name, None):
            assert os.environ[name] == "NHD"
        assert os.environ[name] == "NHD"
    finally:
        os.environ.pop(name, None)
