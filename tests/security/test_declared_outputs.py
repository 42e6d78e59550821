"""O1 of the third trust round (item 6 of the verdict issue): every declared output counts.

A replay whose only output that differs is a plain file (``out/result.txt``) used to read
EQUIVALENT, exit 0 ("only checkpoints and metrics are judged by tolerance"): a program
that wrote a different answer each time passed as reproduced.  Now a declared output that
is not a checkpoint is judged by its bytes, unless the run declared it volatile at record
time (``record --volatile GLOB``), which the manifest, the comparison and its reasons show.

Real records and real replays on the local backend of a program that writes 16 random
bytes into its output: two runs write the same bytes with a chance of 2**-128, so a
wrong EQUIVALENT has that chance at most.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.training import program_repo, record_run, replay_tui

PROGRAM = """\
import os, pathlib
out = pathlib.Path("out"); out.mkdir(exist_ok=True)
(out / "result.txt").write_text(os.urandom(16).hex() + "\\n")
(out / "config.txt").write_text("lr 0.1\\n")
print("step 1 loss 0.5")
"""


def _repo(tmp_path: Path) -> Path:
    return program_repo(tmp_path / "repo", {"prog.py": PROGRAM}, "a program whose answer changes")


def _record(store: Path, repo: Path, *extra: str) -> str:
    return record_run(store, repo, "--artifact", "out/*", *extra, "--", "python", "prog.py")


def test_a_plain_output_that_differs_makes_the_replay_diverged(tmp_path: Path) -> None:
    repo, store = _repo(tmp_path), tmp_path / "runs.db"
    rid = _record(store, repo)
    proc = replay_tui(store, "replay", rid, "--backend", "local", "--quiet", "--json")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the run's determinism is unknown (no SDK), so the adaptive rule measured a floor
    # first (three replicas); a file of other bytes is beyond the tolerance in each, and
    # no noise of the metrics explains it
    replays = json.loads(proc.stdout)["replays"]
    assert {r["verdict"] for r in replays} == {"DIVERGED"}, replays
    for r in replays:
        cmp = r["comparison"]
        assert any("file out/result.txt differs" in why for why in cmp["reasons"]), cmp
        same = {a["path"]: a["status"] for a in cmp["artifacts"]}
        assert same == {"out/config.txt": "match", "out/result.txt": "differs"}
    once = replay_tui(store, "compare", rid, replays[0]["replay_run"], "--json")
    first = json.loads(once.stdout)["reasons"]
    assert any(r.startswith("file out/result.txt differs") for r in first), first
    assert any("record --volatile" in r for r in first)


def test_an_output_declared_volatile_is_listed_not_judged(tmp_path: Path) -> None:
    repo, store = _repo(tmp_path), tmp_path / "runs.db"
    rid = _record(store, repo, "--volatile", "out/result.*")
    shown = json.loads(replay_tui(store, "show", rid, "--json").stdout)
    assert shown["manifest"]["capture"]["volatile_globs"] == ["out/result.*"], shown.keys()
    proc = replay_tui(store, "replay", rid, "--backend", "local", "--quiet", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(proc.stdout)["replays"]
    assert r["verdict"] == "EQUIVALENT"  # not IDENTICAL: the bytes did differ
    cmp = r["comparison"]
    (x,) = [a for a in cmp["artifacts"] if a["path"] == "out/result.txt"]
    assert x["status"] == "differs" and x["volatile"] == "out/result.*"
    assert any("declared volatile at record time" in why for why in cmp["reasons"])


def test_a_volatile_glob_that_leaves_the_folder_is_refused(tmp_path: Path) -> None:
    repo, store = _repo(tmp_path), tmp_path / "runs.db"
    proc = replay_tui(store, "record", "--volatile", "../*", "--", "python", "prog.py", cwd=repo)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--volatile '../*' is not a glob under the working folder" in proc.stderr
    assert not store.exists() or "run_id" not in proc.stdout
