"""``drill --junit`` through the real Slurm cluster: the report ``junitparser`` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.replay.test_drill_junit import _check_against_json, _suite
from tests.replay.test_slurm import cluster, recorded, store  # noqa: F401 (fixtures)
from tests.support.training import replay_tui

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]


def test_slurm_drill_report(store: Path, recorded: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    report = tmp_path / "drill.xml"
    proc = replay_tui(
        store, "drill", "--backend", "slurm", "--count", "3", "--pick", "oldest",
        "--junit", report, "--json", "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    out = json.loads(proc.stdout)
    suite = _suite(report)
    _check_against_json(suite, out)
    assert suite.tests == 3 and all(c.is_passed for c in suite)
    assert {c.classname for c in suite} == {"replay-tui.drill.slurm"}
