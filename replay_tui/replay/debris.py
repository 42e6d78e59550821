"""What a killed replay leaves behind, and how the next one cleans it up.

A replay whose host process is SIGKILLed (or whose machine reboots) cannot clean up
after itself: its container runs on, its checkout and temporary folder stay, and git
keeps a worktree registration for it.  So every replay

- claims its scratch folder with an owner file (pid, process start time, host, repository,
  attempt id) before anything runs in it,
- labels its containers with the same owner
  (``replay_tui.replay.backends.docker.engine.owner_labels``),
- records an ``attempt`` in the store's ledger before the run begins,

and the next replay, on any backend, sweeps what dead owners left: folders, worktree
registrations, containers.  A live owner's debris is never touched, nor a folder kept
on purpose (``--keep-workdir`` drops the claim).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.door import Refused, read_under

SCRATCH_PREFIX = "replay-tui-replay-"
OWNER_FILE = ".replay-tui-owner.json"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), to tell pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def me() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "start": _start_time(pid), "host": socket.gethostname()}


def owner_alive(owner: dict[str, Any]) -> bool:
    """Whether the process that claimed something still runs (True if we cannot tell)."""
    if owner.get("host") != socket.gethostname():
        return True  # another machine's: not ours to judge
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = _start_time(pid)
    return start is not None and start == owner.get("start")


@dataclass
class Claim:
    path: Path
    owner: dict[str, Any]

    def release(self) -> None:
        """The folder is kept on purpose: never sweep it."""
        with contextlib.suppress(OSError):
            (self.path / OWNER_FILE).unlink()


def claim(path: Path, *, attempt: str, repo: Path | None = None) -> Claim:
    owner = {**me(), "attempt": attempt, "repo": str(repo) if repo else None}
    (path / OWNER_FILE).write_text(json.dumps(owner))
    return Claim(path, owner)


def set_repo(c: Claim, repo: Path) -> None:
    c.owner["repo"] = str(repo)
    with contextlib.suppress(OSError):
        (c.path / OWNER_FILE).write_text(json.dumps(c.owner))


def sweep_scratch(
    bases: Iterable[Path | None], on_note: Callable[[str], None] = lambda _: None
) -> list[Path]:
    """Remove scratch folders whose owner died, and their worktree registrations."""
    removed: list[Path] = []
    for base in bases:
        root = Path(base) if base is not None else Path(tempfile.gettempdir())
        try:
            entries = [p for p in root.iterdir() if p.name.startswith(SCRATCH_PREFIX)]
        except OSError:
            continue
        for folder in entries:
            # anyone can leave a folder of that name in a shared temporary folder: its
            # owner file is read through the door from ``root`` (the folder itself and
            # the file never through a link, a regular file only, bounded)
            try:
                raw = read_under(root, f"{folder.name}/{OWNER_FILE}", "owner file")
                owner = json.loads(raw.decode("utf-8"))
            except (Refused, ValueError):
                continue  # not claimed (kept on purpose, or not ours)
            if not isinstance(owner, dict) or owner_alive(owner):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            repo = owner.get("repo")
            if isinstance(repo, str) and Path(repo).is_dir():
                from replay_tui.replay.checkout import git_cmd, repo_lock

                with repo_lock(Path(repo)):  # hooks and fsmonitor off, as every host git
                    subprocess.run(git_cmd(Path(repo), "worktree", "prune"), capture_output=True)
            removed.append(folder)
            on_note(
                f"removed {folder} left by a replay that was killed"
                f" (pid {owner.get('pid')}, attempt {owner.get('attempt')})"
            )
    return removed
