"""Worktrees of one repository are added and removed safely from many replays at once.

A drill fanned out to Slurm or bisect probes run in parallel check out runs of the same
repository concurrently; git's own lock files fail instead of waiting.
"""

from __future__ import annotations

import threading
from pathlib import Path

from replay_tui.replay.checkout import Worktree, make_worktree
from tests.helpers.repos import commit_repo
from tests.support.training import git


def test_sixteen_concurrent_worktrees_of_one_repository(tmp_path: Path) -> None:
    repo = commit_repo(tmp_path / "repo", {"train.py": "print('x')\n"}, "one")
    commit = git(repo, "rev-parse", "HEAD").strip()
    errors: list[BaseException] = []
    made: list[Worktree] = []
    start = threading.Barrier(16)

    def replay() -> None:
        start.wait()
        try:
            wt = make_worktree(repo, commit, None, base=tmp_path)
            made.append(wt)
            assert (wt.path / "train.py").read_text() == "print('x')\n"
            wt.remove()
        except BaseException as e:  # collected: asserted below
            errors.append(e)

    threads = [threading.Thread(target=replay) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and len(made) == 16
    assert git(repo, "worktree", "list").count("\n") == 1  # every one removed again
    assert not any(wt.path.exists() for wt in made)
