"""Fixtures the TUI's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.noisy import within
from tests.support.app import cli_env, record_gated_run

__all__ = ["gated", "python_with_torch", "within"]


@pytest.fixture
def python_with_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local backend runs the recorded ``python``: let it be this interpreter's."""
    monkeypatch.setenv("PATH", cli_env()["PATH"])


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Path, str, Path]:
    """A run recorded by the real launcher whose program runs for minutes once its gate
    file is gone: a cancel always lands mid-run."""
    return record_gated_run(tmp_path)
