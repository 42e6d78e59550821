"""Fixtures a folder's ``conftest.py`` imports, so that its tests ask for them by name: the
example's repository and a store path (tests that record with the real launcher), and
the training image on the real engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.engines import docker_client, train_env
from tests.support.training import make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository holding the example script and its (ignored) data."""
    return make_repo(tmp_path / "repo")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Where the test's store goes (not made yet)."""
    return tmp_path / "store" / "runs.db"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The training image's tag, the real Docker engine having answered (its client open
    while the module runs)."""
    client = docker_client()
    yield train_env()
    client.close()
