"""Real git repositories for the tests that record or replay a program of their own."""

from __future__ import annotations

from pathlib import Path

from tests.support.training import git


def commit_repo(
    path: Path, files: dict[str, str], message: str = "program", *, ignore: str | None = None
) -> Path:
    """A fresh git repository at ``path`` (branch ``main``) whose one commit, ``message``,
    holds ``files`` (relative path -> text) and, when ``ignore`` is given, a ``.gitignore`` of that
    text."""
    tracked = dict(files) if ignore is None else {**files, ".gitignore": ignore}
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in tracked.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", *tracked)
    git(path, "commit", "-q", "-m", message)
    return path
