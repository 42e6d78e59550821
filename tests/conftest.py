"""Shared fixtures: a store file in a temp dir, realistic manifests, the CLI as a process."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.factories import apply_overrides, realistic_manifest

REPO_ROOT = Path(__file__).resolve().parent.parent

MakeManifest = Callable[..., dict[str, Any]]
RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Where a test's SQLite store lives (a real file, created on first open)."""
    return tmp_path / "store.db"


@pytest.fixture
def make_manifest() -> MakeManifest:
    """Factory of realistic, valid, unsealed manifest dicts; each call is a new run.

    ``make_manifest(name="x", code__commit="...")`` overrides fields (``__`` reaches into
    groups); ``make_manifest(index=5)`` picks the run number explicitly.
    """
    counter = itertools.count()

    def make(index: int | None = None, **overrides: Any) -> dict[str, Any]:
        i = next(counter) if index is None else index
        return apply_overrides(realistic_manifest(i), overrides)

    return make


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the repo root importable (tests.factories)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("REPLAY_TUI_STORE", None)
    return env


@pytest.fixture
def cli(store_path: Path) -> RunCli:
    """Run ``replay-tui --store <store_path> ARGS...`` in a fresh process."""

    def run(*args: str | os.PathLike[str], store: Path | None = None) -> Any:
        argv: Sequence[str] = [
            sys.executable,
            "-m",
            "replay_tui.cli",
            "--store",
            str(store or store_path),
            *map(str, args),
        ]
        return subprocess.run(
            argv, capture_output=True, text=True, env=subprocess_env(), timeout=120
        )

    return run
