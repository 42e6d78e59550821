"""Find the recorded commit and check it out in a throwaway git worktree.

Search order (DESIGN.md): ``--repo PATH``, then the repository the run was recorded from
(its path is kept beside the manifest on this host), then a clone of ``repo_url`` in a
cache beside the store.  If the commit is nowhere, the replay stops with exit 3.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from replay_tui.errors import InfraError


@dataclass
class Worktree:
    repo: Path
    path: Path
    commit: str
    diff_applied: bool

    def remove(self) -> None:
        subprocess.run(
            ["git", "-C", str(self.repo), "worktree", "remove", "--force", str(self.path)],
            capture_output=True,
        )
        shutil.rmtree(self.path, ignore_errors=True)
        subprocess.run(["git", "-C", str(self.repo), "worktree", "prune"], capture_output=True)


def _has_commit(repo: Path, commit: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
    )
    return proc.returncode == 0


def _is_repo(path: Path) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--git-dir"], capture_output=True
        ).returncode
        == 0
    )


def find_repo(
    commit: str,
    *,
    explicit: Path | None,
    recorded: Path | None,
    repo_url: str | None,
    cache_dir: Path,
) -> Path:
    """A local repository that has ``commit``, cloning or fetching ``repo_url`` if needed."""
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
        import git

        key = hashlib.sha256(repo_url.encode()).hexdigest()[:16]
        cache = cache_dir / key
        try:
            if _is_repo(cache):
                git.Repo(cache).remote().fetch()
            else:
                cache.parent.mkdir(parents=True, exist_ok=True)
                git.Repo.clone_from(repo_url, cache, no_checkout=True)
            if _has_commit(cache, commit):
                return cache
            tried.append(f"remote {repo_url} (commit not there: rebased away?)")
        except git.GitCommandError as e:
            tried.append(f"remote {repo_url} (unreachable: {e.stderr.strip()[:120]})")
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
    proc = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "--force", str(path), commit],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise InfraError(f"git worktree add failed: {proc.stderr.strip()}")
    wt = Worktree(repo, path, commit, False)
    if diff:
        ap = subprocess.run(
            ["git", "-C", str(path), "apply", "--binary", "--whitespace=nowarn", "-"],
            input=diff,
            capture_output=True,
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
