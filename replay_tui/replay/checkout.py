"""Find the recorded commit and check it out in a throwaway git worktree.

Search order: ``--repo PATH``, then the repository the run was recorded from (its path
is kept beside the manifest on this host), then a clone of ``repo_url`` in a cache beside
the store.  If the commit is nowhere, the replay stops with exit 3.

Every git command here runs over a repository that a run (or a manifest from elsewhere)
may have influenced, so none of them may run code: hooks are off
(``core.hooksPath=/dev/null``), fsmonitor is off, and only the transports named in
``ALLOWED_PROTOCOLS`` exist (never ``ext::``, never ``file://`` from a manifest).
Fetching ``repo_url`` is a network action taken only when the caller allows it
(``--fetch-repo``); otherwise a cached clone that already has the commit is used, and
nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.errors import BadInput, InfraError
from replay_tui.safety import escape_control

ALLOWED_PROTOCOLS = ("https", "ssh")
FETCH_FLAG = "--fetch-repo"
# Options that keep a git command from running anything found in the repository.
SAFE_GIT = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "protocol.allow=never",
    *(x for p in ALLOWED_PROTOCOLS for x in ("-c", f"protocol.{p}.allow=always")),
    "-c",
    "protocol.ext.allow=never",
)
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._/~-][^\s]*$")


def git_cmd(repo: Path, *args: str) -> list[str]:
    """``git -C repo <safe options> args...``: no hooks, no fsmonitor, no ext::."""
    return ["git", *SAFE_GIT, "-C", str(repo), *args]


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PROTOCOL_FROM_USER="0", GIT_ASKPASS="true")
    return env


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    return subprocess.run(cmd, capture_output=True, env=_git_env(), **kwargs)


def check_repo_url(url: str) -> str:
    """``url`` if git may fetch it: https://, ssh:// or ``user@host:path``; else BadInput."""
    shown = escape_control(url[:200])
    if url.startswith("-") or any(ord(c) < 0x20 for c in url):
        raise BadInput(f"repo_url {shown!r} is not a repository address")
    scheme = url.split("://", 1)[0].lower() if "://" in url else None
    if scheme is None and "::" in url:
        scheme = url.split("::", 1)[0].lower()  # transport::address, e.g. ext::
    if scheme is None and _SCP_LIKE.match(url):
        scheme = "ssh"
    if scheme not in ALLOWED_PROTOCOLS:
        raise BadInput(
            f"repo_url {shown!r} uses {scheme or 'a local path'}: only"
            f" {', '.join(p + '://' for p in ALLOWED_PROTOCOLS)} (or user@host:path) is fetched",
            "pass --repo PATH to a local clone that has the commit",
        )
    return url


@dataclass
class Worktree:
    repo: Path
    path: Path
    commit: str
    diff_applied: bool

    def remove(self) -> None:
        with repo_lock(self.repo):
            _run(git_cmd(self.repo, "worktree", "remove", "--force", "--", str(self.path)))
            shutil.rmtree(self.path, ignore_errors=True)
            _run(git_cmd(self.repo, "worktree", "prune"))


@contextlib.contextmanager
def repo_lock(repo: Path) -> Iterator[None]:
    """One worktree change at a time per repository, across threads and processes.

    Concurrent replays of runs from one repository (a drill fanned out to Slurm, bisect
    probes in parallel) each add and remove a worktree; git serialises those through
    lock files it does not wait on, so two at once can fail.  The lock file lives in the
    temp folder, never in the user's repository.
    """
    import fcntl

    key = hashlib.sha256(os.fsencode(repo.resolve())).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"replay-tui-git-{key}.lock"
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(key, threading.Lock())
    with tlock, lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def _has_commit(repo: Path, commit: str) -> bool:
    return _run(git_cmd(repo, "cat-file", "-e", f"{commit}^{{commit}}")).returncode == 0


def _is_repo(path: Path) -> bool:
    return _run(git_cmd(path, "rev-parse", "--git-dir")).returncode == 0


def find_repo(
    commit: str,
    *,
    explicit: Path | None,
    recorded: Path | None,
    repo_url: str | None,
    cache_dir: Path,
    allow_fetch: bool = False,
    on_note: Any = None,
) -> Path:
    """A local repository that has ``commit``; fetches ``repo_url`` only if ``allow_fetch``.

    ``on_note(text)`` (optional) is told when the network is used.
    """
    tried: list[str] = []
    for cand, label in ((explicit, "--repo"), (recorded, "the recording repository")):
        if cand is None:
            continue
        if not _is_repo(cand):
            tried.append(f"{label} {cand} (not a git repository)")
            continue
        if _has_commit(cand, commit):
            return cand
        tried.append(f"{label} {cand} (commit not there)")
    if repo_url:
        shown = escape_control(repo_url[:200])
        key = hashlib.sha256(repo_url.encode()).hexdigest()[:16]
        cache = cache_dir / key
        cached = _is_repo(cache)
        if cached and _has_commit(cache, commit):
            return cache
        if not allow_fetch:
            tried.append(
                f"remote {shown} (not fetched: fetching is a network action; pass"
                f" {FETCH_FLAG} to allow it)"
            )
        else:
            check_repo_url(repo_url)
            if on_note is not None:
                on_note(f"fetching {shown} over the network ({FETCH_FLAG})")
            if cached:
                proc = _run(git_cmd(cache, "fetch", "--quiet", "origin"), timeout=600)
            else:
                cache.parent.mkdir(parents=True, exist_ok=True)
                proc = _run(
                    ["git", *SAFE_GIT, "clone", "--quiet", "--bare", "--", repo_url, str(cache)],
                    timeout=600,
                )
            if proc.returncode != 0:
                err = proc.stderr.decode("utf-8", "replace").strip()
                tried.append(f"remote {shown} (unreachable: {escape_control(err[:160])})")
            elif _has_commit(cache, commit):
                return cache
            else:
                tried.append(f"remote {shown} (commit not there: rebased away?)")
    raise InfraError(
        f"commit {commit} was not found: tried " + ("; ".join(tried) or "nothing"),
        "pass --repo PATH to a clone that has the commit; if it was rebased away,"
        " the code of this run is lost (record that in the audit)",
    )


def make_worktree(
    repo: Path, commit: str, diff: bytes | None, *, base: Path | None = None
) -> Worktree:
    """Check ``commit`` out into a new temporary folder (under ``base``) and apply the diff."""
    path = Path(tempfile.mkdtemp(prefix="replay-tui-wt-", dir=base))
    with repo_lock(repo):
        proc = _run(
            git_cmd(repo, "worktree", "add", "--detach", "--force", "--", str(path), commit),
            text=True,
        )
    if proc.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise InfraError(f"git worktree add failed: {proc.stderr.strip()}")
    wt = Worktree(repo, path, commit, False)
    if diff:
        ap = _run(
            git_cmd(path, "apply", "--binary", "--whitespace=nowarn", "-"),
            input=diff,
        )
        if ap.returncode != 0:
            with contextlib.suppress(Exception):
                wt.remove()
            raise InfraError(
                "the stored diff does not apply to the recorded commit: "
                + ap.stderr.decode("utf-8", "replace").strip()[:300]
            )
        wt.diff_applied = True
    return wt
