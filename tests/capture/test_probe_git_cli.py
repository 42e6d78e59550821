"""probe_git reads git through the command line: the same GitState as GitPython gave.

Each repository state is probed twice, by ``probe_git`` and by the GitPython
implementation it replaced (kept here as the reference), and every field must agree.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay_tui.capture.probes import GitState, probe_git, scrub_url
from tests.support.training import git

REPO_ROOT = Path(__file__).resolve().parents[2]


def _probe_git_gitpython(cwd: Path) -> GitState:
    """The GitPython implementation probe_git had before, unchanged."""
    import git

    try:
        repo = git.Repo(cwd, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return GitState()
    try:
        root = Path(repo.working_tree_dir or cwd).resolve()
        state = GitState(root=root)
        state.workdir = os.path.relpath(cwd.resolve(), root).replace(os.sep, "/")
        try:
            state.commit = repo.head.commit.hexsha
        except ValueError:  # no commits yet
            return state
        if not repo.head.is_detached:
            state.branch = repo.active_branch.name
        remotes = list(repo.remotes)
        if remotes:
            origin = next((r for r in remotes if r.name == "origin"), remotes[0])
            urls = list(origin.urls)
            state.repo_url = scrub_url(urls[0]) if urls else None
        state.untracked = sorted(repo.untracked_files)
        state.dirty = repo.is_dirty(untracked_files=False)
        if state.dirty:
            proc = subprocess.run(
                ["git", "diff", "--binary", "HEAD"],
                cwd=root,
                capture_output=True,
                check=True,
            )
            state.diff = proc.stdout
        return state
    finally:
        repo.close()


def same(cwd: Path) -> GitState:
    """probe_git(cwd), checked field by field against the GitPython reference."""
    new = probe_git(cwd)
    assert dataclasses.asdict(new) == dataclasses.asdict(_probe_git_gitpython(cwd))
    return new


def commit(repo: Path, *files: str, message: str = "c") -> None:
    for name in files:
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name}\n")
    git(repo, "add", "--", *files)
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository on branch main with two committed files, one in a subfolder."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, "train.py", "pkg/model.py", message="first")
    return path


# -- no repository, no commit ------------------------------------------------------------


def test_no_repository(tmp_path: Path) -> None:
    assert same(tmp_path) == GitState()


def test_missing_folder(tmp_path: Path) -> None:
    assert same(tmp_path / "absent") == GitState()


def test_no_commits_yet(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.py").write_text("x\n")
    (tmp_path / "sub").mkdir()
    got = same(tmp_path / "sub")
    assert got.root == tmp_path.resolve() and got.workdir == "sub"
    assert got.commit is None and got.dirty is None and got.untracked == []


# -- clean and dirty work trees -----------------------------------------------------------


def test_clean(repo: Path) -> None:
    got = same(repo)
    assert got.commit == git(repo, "rev-parse", "HEAD").strip()
    assert (got.branch, got.dirty, got.diff, got.untracked) == ("main", False, None, [])
    assert got.repo_url is None and got.workdir == "."


def test_modified_tracked_file(repo: Path) -> None:
    (repo / "train.py").write_text("changed\n")
    got = same(repo)
    assert got.dirty is True and got.diff and b"+changed" in got.diff


def test_staged_only(repo: Path) -> None:
    (repo / "train.py").write_text("staged\n")
    git(repo, "add", "train.py")
    assert same(repo).dirty is True


def test_staged_new_file_and_rename(repo: Path) -> None:
    (repo / "new.py").write_text("new\n")
    git(repo, "add", "new.py")
    git(repo, "mv", "pkg/model.py", "pkg/renamed model.py")
    assert same(repo).dirty is True


def test_intent_to_add(repo: Path) -> None:
    (repo / "later.py").write_text("later\n")
    git(repo, "add", "-N", "later.py")
    assert same(repo).dirty is True


def test_deleted_file(repo: Path) -> None:
    (repo / "pkg" / "model.py").unlink()
    assert same(repo).dirty is True


def test_mode_change(repo: Path) -> None:
    (repo / "train.py").chmod(0o755)
    assert same(repo).dirty is True


def test_touched_but_unchanged(repo: Path) -> None:
    os.utime(repo / "train.py", (1, 1))
    assert same(repo).dirty is False


def test_merge_conflict(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "train.py").write_text("other\n")
    git(repo, "commit", "-q", "-am", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "train.py").write_text("mine\n")
    git(repo, "commit", "-q", "-am", "mine")
    proc = subprocess.run(["git", "-C", str(repo), "merge", "other"], capture_output=True)
    assert proc.returncode != 0
    assert same(repo).dirty is True


def test_index_file_missing(repo: Path) -> None:
    """No index (as after ``clone --no-checkout``): GitPython skipped the index-vs-HEAD
    comparison, so the tree is clean and every file untracked."""
    (repo / ".git" / "index").unlink()
    got = same(repo)
    assert got.dirty is False and got.untracked == ["pkg/model.py", "train.py"]


# -- untracked and ignored files ---------------------------------------------------------


def test_untracked_names(repo: Path) -> None:
    names = ["notes/with space.txt", "notes/ünï.py", "notes/new\nline.txt", 'notes/q"uo\\te']
    for name in names:
        (repo / "notes").mkdir(exist_ok=True)
        (repo / name).write_text("u\n")
    (repo / "top.txt").write_text("u\n")
    got = same(repo)
    assert got.untracked == sorted([*names, "top.txt"])
    assert got.dirty is False


def test_ignored_files_left_out(repo: Path) -> None:
    (repo / ".gitignore").write_text("out/\n*.log\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    (repo / "out").mkdir()
    (repo / "out" / "ckpt.pt").write_text("w\n")
    (repo / "run.log").write_text("l\n")
    (repo / "kept.txt").write_text("k\n")
    assert same(repo).untracked == ["kept.txt"]


def test_nested_repository_untracked(repo: Path) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q", "-b", "main")
    commit(nested, "x.py")
    assert same(repo).untracked == ["vendor/lib/"]
    got = same(nested)
    assert got.root == nested.resolve() and got.workdir == "."


def test_undecodable_name_kept(repo: Path) -> None:
    """GitPython failed on a name that is not UTF-8; it comes back as os.fsdecode gives it."""
    raw = os.fsencode(repo) + b"/bad\xff.txt"
    with open(raw, "w") as f:
        f.write("u\n")
    assert probe_git(repo).untracked == [os.fsdecode(b"bad\xff.txt")]


# -- HEAD ----------------------------------------------------------------------------------


def test_detached_head(repo: Path) -> None:
    commit(repo, "second.py")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    got = same(repo)
    assert got.branch is None and got.commit is not None


def test_branch_with_slash(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature/new-loss")
    assert same(repo).branch == "feature/new-loss"


def test_subfolder_workdir(repo: Path) -> None:
    (repo / "pkg" / "deep").mkdir()
    got = same(repo / "pkg" / "deep")
    assert got.workdir == "pkg/deep" and got.root == repo.resolve()


def test_linked_worktree(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "exp", str(wt))
    (wt / "train.py").write_text("exp\n")
    got = same(wt / "pkg")
    assert got.root == wt.resolve() and got.branch == "exp" and got.dirty is True


# -- remotes -------------------------------------------------------------------------------


def test_only_upstream(repo: Path) -> None:
    git(repo, "remote", "add", "upstream", "https://example.com/up.git")
    assert same(repo).repo_url == "https://example.com/up.git"


def test_first_remote_without_origin(repo: Path) -> None:
    git(repo, "remote", "add", "zeta", "https://example.com/z.git")
    git(repo, "remote", "add", "alpha", "https://example.com/a.git")
    assert same(repo).repo_url == "https://example.com/z.git"


def test_origin_among_others(repo: Path) -> None:
    git(repo, "remote", "add", "fork", "git@example.com:me/fork.git")
    git(repo, "remote", "add", "origin", "https://example.com/team/train.git")
    git(repo, "config", "--add", "remote.origin.url", "https://example.com/second.git")
    assert same(repo).repo_url == "https://example.com/team/train.git"


def test_credentials_scrubbed(repo: Path) -> None:
    git(repo, "remote", "add", "origin", "https://user:tok3n@example.com:8443/t/r.git")
    assert same(repo).repo_url == "https://example.com:8443/t/r.git"


def test_instead_of_applied(repo: Path) -> None:
    git(repo, "remote", "add", "origin", "gh:team/train.git")
    git(repo, "config", "url.https://example.com/.insteadOf", "gh:")
    git(repo, "config", "url.https://mirror.example.com/.insteadOf", "gh:team/")
    assert same(repo).repo_url == "https://mirror.example.com/train.git"


def test_remote_without_url(repo: Path) -> None:
    git(repo, "config", "remote.bare-name.fetch", "+refs/heads/*:refs/remotes/x/*")
    assert same(repo).repo_url == "bare-name"


def test_remote_in_global_config_only(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitPython listed the repository's own remotes; a global one is not among them,
    though a global URL of a repository remote comes first in ``get-url --all``."""
    cfg = tmp_path / "global.gitconfig"
    cfg.write_text('[remote "origin"]\n\turl = https://example.com/global.git\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    git(repo, "remote", "add", "upstream", "https://example.com/up.git")
    assert same(repo).repo_url == "https://example.com/up.git"
    cfg.write_text('[remote "upstream"]\n\turl = https://example.com/global.git\n')
    assert same(repo).repo_url == "https://example.com/global.git"


# -- submodules ----------------------------------------------------------------------------


@pytest.fixture
def with_submodule(repo: Path, tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    commit(lib, "lib.py")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    git(repo, "commit", "-q", "-m", "submodule")
    return repo


def test_submodule_clean(with_submodule: Path) -> None:
    assert same(with_submodule).dirty is False


def test_submodule_untracked_only(with_submodule: Path) -> None:
    """``git diff`` ignores untracked files inside a submodule, so GitPython did too."""
    (with_submodule / "lib" / "scratch.txt").write_text("s\n")
    got = same(with_submodule)
    assert got.dirty is False and got.untracked == []


def test_submodule_modified_worktree(with_submodule: Path) -> None:
    (with_submodule / "lib" / "lib.py").write_text("edited\n")
    assert same(with_submodule).dirty is True


def test_submodule_new_commit(with_submodule: Path) -> None:
    commit(with_submodule / "lib", "more.py")
    assert same(with_submodule).dirty is True


def test_inside_submodule(with_submodule: Path) -> None:
    got = same(with_submodule / "lib")
    assert got.root == (with_submodule / "lib").resolve() and got.repo_url
    assert got.repo_url.endswith("/lib")


# -- the environment -----------------------------------------------------------------------


def test_git_dir_variable_not_followed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "other")
    commit(other, "o.py")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert same(repo).branch == "main"


def test_git_not_installed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin"))
    assert probe_git(repo) == GitState()


def test_bare_repository_and_git_folder(tmp_path: Path, repo: Path) -> None:
    """Places with no work tree: nothing known (GitPython gave a partial state, or failed
    at ``git status`` once there were commits)."""
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert probe_git(bare) == GitState()
    assert probe_git(repo / ".git") == GitState()


def test_probe_does_not_import_gitpython(repo: Path) -> None:
    code = (
        "import sys, pathlib, replay_tui.capture.probes as p\n"
        f"s = p.probe_git(pathlib.Path({str(repo)!r}))\n"
        "assert s.commit, s\n"
        "print('git' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
