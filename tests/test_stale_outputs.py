"""A failed run does not claim another run's checkpoints: files an earlier run left in
the output folder are reported as stale, not hashed as this run's outputs.  Real
recordings with the real launcher (CLI processes) in a real git repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from storage.store import RunStore
from tests.training import cli_env, git

PROGRAM = """\
import os, sys
os.makedirs("out", exist_ok=True)
for step in range(10):
    print(f"step {step} loss {1.0 / (step + 1)}", flush=True)
    if step == 5 and sys.argv[1] == "crash":
        raise SystemExit("crashed at step 5")
with open("out/model.pt", "w") as f:
    f.write(sys.argv[1])
"""


def _record(store: Path, repo: Path, mode: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "replay-tui")
    argv = [exe, "--store", str(store), "record", "--artifact", "out/*"]
    return subprocess.run(
        [*argv, "--", "python3", "train.py", mode],
        cwd=repo,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_crashed_run_reports_the_earlier_checkpoint_as_stale(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text(PROGRAM)
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", "train.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "train")
    store = tmp_path / "store.db"
    ok = _record(store, repo, "good")
    assert ok.returncode == 0, ok.stderr[-2000:]
    crashed = _record(store, repo, "crash")
    assert crashed.returncode == 1, crashed.stderr[-2000:]
    assert "out/model.pt: stale" in crashed.stdout + crashed.stderr
    rewritten = _record(store, repo, "again")  # rewrites the file: its own output again
    assert rewritten.returncode == 0, rewritten.stderr[-2000:]
    with RunStore(store) as s:
        ids = [r.id for r in reversed(s.list_runs())]  # oldest first
        arts = [{a.path: a.sha256 for a in s.manifest(i).outputs.artifacts} for i in ids]
        from replay_tui.gaps import evaluate

        gaps = {g.code for g in evaluate(s.manifest(ids[1]))}
    assert arts[0]["out/model.pt"] is not None
    assert arts[1] == {"out/model.pt": None}  # listed, never with the earlier run's hash
    assert "ARTIFACT_NO_HASH" in gaps
    assert arts[2]["out/model.pt"] not in (None, arts[0]["out/model.pt"])
