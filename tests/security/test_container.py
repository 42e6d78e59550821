"""Items 1 and 2 of the trust issue, in the real Docker engine with the real image.

Code inside a container (``record --image`` or a docker replay) writes symbolic links
to host files into its writable output folder and tries to plant a git hook through the
repository's ``.git``.  Neither may reach the host: links are refused when artifacts are
collected, the repository is never mounted writable and ``.git`` is never mounted at all.
These tests need scripts/docker-env.sh; without an engine they fail, never skip.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.foreign import foreign_manifest, head, ingested
from tests.support.training import git, make_repo, replay_tui

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not a real key\n"

PROBE = """\
import os, pathlib, sys
os.makedirs('out', exist_ok=True)
for name, target in (('out/model.pt', sys.argv[1]), ('out/key', sys.argv[2])):
    if not os.path.lexists(name):
        os.symlink(target, name)
res = []
for p in ('.git/hooks/post-checkout', '.git/config', '.git'):
    try:
        pathlib.Path(p).write_text('#!/bin/sh\\ntouch /tmp/pwned\\n')
        res.append(p + ':written')
    except OSError as e:
        res.append(p + ':' + type(e).__name__)
listing = sorted(os.listdir('.git')) if os.path.isdir('.git') else 'not-a-folder'
print('gitprobe', res, listing, flush=True)
open('out/real.txt', 'w').write('ok')
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = make_repo(tmp_path / "repo")
    (r / "probe.py").write_text(PROBE)
    git(r, "add", "probe.py")
    git(r, "commit", "-q", "-m", "probe")
    return r


def _secret(tmp_path: Path) -> Path:
    p = tmp_path / "host-secret"
    p.write_bytes(SECRET)
    return p


def _assert_git_untouched(repo: Path, before: set[str]) -> None:
    assert {p.name for p in (repo / ".git" / "hooks").iterdir()} == before
    assert b"pwned" not in (repo / ".git" / "config").read_bytes()


def _no_secret_kept(store: Path) -> None:
    objects = ObjectStore.beside(store)
    assert objects.get(hashlib.sha256(SECRET).hexdigest()) is None
    if objects.root.exists():
        for p in objects.root.rglob("*"):
            assert not p.is_file() or p.read_bytes() != SECRET


def test_record_in_a_container_keeps_links_and_git_out(
    image: str, repo: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store" / "runs.db"
    secret = _secret(tmp_path)
    hooks = {p.name for p in (repo / ".git" / "hooks").iterdir()}
    proc = replay_tui(
        store,
        "record",
        "--image",
        image,
        "--artifact",
        "out/*",
        "--",
        "python3",
        "probe.py",
        str(secret),
        str(store.parent / "objects"),
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("gitprobe"))
    # .git is an empty read-only tmpfs in the container: nothing to read, nothing to write
    assert "written" not in line and "[]" in line, line
    assert "refused: out/model.pt: out/model.pt is a symbolic link" in proc.stderr
    _assert_git_untouched(repo, hooks)
    with RunStore(store) as s:
        (rec,) = s.list_runs()
        arts = {a.path: a.sha256 for a in s.manifest(rec.id).outputs.artifacts}
    assert arts["out/real.txt"] is not None
    assert arts["out/model.pt"] is None and arts["out/key"] is None
    _no_secret_kept(store)


def test_record_in_a_container_never_mounts_the_repository_writable(
    image: str, repo: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store" / "runs.db"
    proc = replay_tui(
        store,
        "record",
        "--image",
        image,
        "--artifact",
        "weights.bin",
        "--",
        "python3",
        "probe.py",
        "a",
        "b",
        cwd=repo,
    )
    assert proc.returncode == 2
    assert "record --image never mounts the repository writable" in proc.stderr
    assert "--artifact 'out/*'" in proc.stderr
    assert not store.exists() or not RunStore(store).list_runs()


def test_a_replay_container_cannot_plant_hooks_or_leak_host_files(
    image: str, repo: Path, tmp_path: Path
) -> None:
    """A manifest whose outputs sit at the top of the workdir gets a writable throwaway
    checkout; its ``.git`` (a file pointing at the real repository) stays hidden."""
    store = tmp_path / "store" / "runs.db"
    secret = _secret(tmp_path)
    digest = os.environ["REPLAY_TUI_TRAIN_DIGEST"].split("@", 1)[1]
    artifacts = [
        {"path": "top.bin", "sha256": "0" * 64, "kind": "file"},
        {"path": "out/model.pt", "sha256": hashlib.sha256(SECRET).hexdigest()},
    ]
    data = foreign_manifest(
        head(repo),
        ["python3", "probe.py", str(secret), str(secret)],
        image={"reference": image, "digest": digest},
        outputs={"artifacts": artifacts},
    )
    ingested(store, tmp_path, data)
    hooks = {p.name for p in (repo / ".git" / "hooks").iterdir()}
    proc = replay_tui(store, "replay", str(data["run_id"]), "--repo", str(repo))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]  # ran, and is not a reproduction
    assert "REPRODUCED" not in out.replace("NOT REPRODUCED", "")
    line = next(ln for ln in out.splitlines() if "gitprobe" in ln)
    # the worktree's .git file is /dev/null, read-only: no hook, no redirect
    assert "written" not in line and "not-a-folder" in line, line
    _assert_git_untouched(repo, hooks)
    _no_secret_kept(store)
