"""A command that cannot start in the image is a failed run (exit 127), not a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.test_replay_docker import engine, train_image  # noqa: F401 (fixtures)
from tests.training import git, replay_tui

pytestmark = pytest.mark.docker


def test_a_command_missing_from_the_image_is_a_failed_run(
    tmp_path: Path,
    engine: Any,  # noqa: F811 (fixture)
    train_image: str,  # noqa: F811 (fixture)
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text("print('never runs')\n")
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "x")
    store = tmp_path / "store" / "runs.db"
    proc = replay_tui(
        store, "record", "--json", "--image", train_image, "--", "no-such-python", "train.py",
        cwd=repo,
    )  # fmt: skip
    assert proc.returncode == 127, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "failed" and out["exit_code"] == 127
    with RunStore(store) as s:
        m = s.manifest(out["run_id"])
        assert m.outputs.log_tail is not None and "cannot start 'no-such-python'" in (
            m.outputs.log_tail
        )
        assert s.verify().ok
