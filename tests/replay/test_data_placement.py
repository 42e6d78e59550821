"""Replay places exactly the recorded data, also in a folder that git only partly tracks.

A data folder often holds a committed ``prepare.py`` and ``readme.md`` beside generated,
ignored files (``train.npz`` here, ``train.bin`` in nanoGPT).  The run records one hash
over the whole folder; the checkout of the commit has only the tracked part.  The replay
must show the program every file the hash covered, for every backend.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.support.training import EXAMPLE, QUICK, git, replay_tui, write_data

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose data/ folder is tracked in part: prepare.py yes, train.npz no."""
    path = tmp_path / "repo"
    (path / "data").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shutil.copy(EXAMPLE, path / "train_mlp.py")
    (path / ".gitignore").write_text("out/\ndata/*.npz\n")
    (path / "data" / "prepare.py").write_text("# writes train.npz (generated, not committed)\n")
    (path / "data" / "readme.md").write_text("the training data\n")
    git(path, "add", "train_mlp.py", ".gitignore", "data/prepare.py", "data/readme.md")
    git(path, "commit", "-q", "-m", "example with a partly tracked data folder")
    write_data(path / "data" / "train.npz", seed=0)
    return path


def _record(store: Path, repo: Path, *image: str) -> str:
    proc = replay_tui(
        store,
        "record",
        "--json",
        "--seed",
        "1",
        *(("--image", image[0]) if image else ()),
        "--artifact",
        "out/*",
        "--data",
        "data",
        "--",
        "python3" if image else "python",
        "train_mlp.py",
        "--data",
        "data/train.npz",
        *QUICK,
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(json.loads(proc.stdout)["run_id"])


def _replay(store: Path, run_id: str, backend: str) -> dict[str, Any]:
    proc = replay_tui(store, "replay", run_id, "--backend", backend, "--json")
    assert proc.returncode == 0, (proc.stderr + proc.stdout)[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _check(store: Path, rid: str, rep: dict[str, Any]) -> None:
    r = rep["replays"][0]
    assert r["verdict"] == "IDENTICAL", r
    with RunStore(store) as s:
        original = s.manifest(rid)
        replay = s.manifest(r["replay_run"])
        # The data hash covered the generated file too, and the replay verified it.
        assert original.data[0].file_count == 3
        assert replay.data[0].sha256 == original.data[0].sha256
        assert s.verify().ok


def test_local_replay_sees_the_untracked_files_of_a_partly_tracked_folder(
    tmp_path: Path, repo: Path
) -> None:
    store = tmp_path / "store" / "runs.db"
    rid = _record(store, repo)
    _check(store, rid, _replay(store, rid, "local"))


@pytest.mark.docker
def test_docker_replay_sees_the_untracked_files_of_a_partly_tracked_folder(
    tmp_path: Path,
    repo: Path,
    train_image: str,
) -> None:
    store = tmp_path / "store" / "runs.db"
    rid = _record(store, repo, train_image)
    assert os.environ.get("REPLAY_TUI_TRAIN_IMAGE") == train_image
    _check(store, rid, _replay(store, rid, "docker"))
