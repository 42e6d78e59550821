"""Fixtures the TUI's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.noisy import within
from tests.support.app import FixedStore, build_fixed_store, cli_env, record_gated_run

__all__ = ["fixed", "gated", "python_with_torch", "within"]


@pytest.fixture(scope="module")
def fixed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FixedStore:
    """The snapshot store (``build_fixed_store``), built once for each test module, in a
    folder named after the module; the module's tests only read it."""
    return build_fixed_store(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]))


@pytest.fixture
def python_with_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local backend runs the recorded ``python``: let it be this interpreter's."""
    monkeypatch.setenv("PATH", cli_env()["PATH"])


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Path, str, Path]:
    """A run recorded by the real launcher whose program runs for minutes once its gate
    file is gone: a cancel always lands mid-run."""
    return record_gated_run(tmp_path)
