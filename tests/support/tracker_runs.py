"""Runs written by the real MLflow and W&B clients, for the import attack tests.

Each builder runs one of the tiny training programs of ``tests/support/programs`` in a
fresh git repository, with the real client, and returns what it wrote; the tests then
tamper with a copy by hand.  ``cli`` runs ``replay-tui`` in a fresh process under a
timeout, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from storage.objects import ObjectStore
from tests.support.training import git

PROGRAMS = Path(__file__).resolve().parent / "programs"
EXE = Path(sys.executable).parent / "replay-tui"
ID_RSA = b"-----BEGIN OPENSSH PRIVATE KEY----- not a real key ID-RSA-90417\n"


def env(**extra: str) -> dict[str, str]:
    out = dict(os.environ)
    for name in ("REPLAY_TUI_STORE", "REPLAY_TUI_IMPORT_MAX_BYTES", "REPLAY_TUI_IMPORT_MAX_POINTS"):
        out.pop(name, None)
    out["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{out.get('PATH', '')}"
    out.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DISABLE_GIT="false",
        MLFLOW_ALLOW_FILE_STORE="true",
    )
    out.update(extra)
    return out


def cli(
    store: Path,
    *args: str | os.PathLike[str],
    timeout: float = 300,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``replay-tui --store STORE ARGS...`` in a fresh process; a hang fails the test."""
    return subprocess.run(
        [str(EXE), "--store", str(store), *map(str, args)],
        env=env(**(extra_env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ledger_head(store: Path) -> tuple[int, str] | None:
    if not store.exists():
        return None
    with sqlite3.connect(store) as conn:
        row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def objects(store: Path) -> list[Path]:
    """Every file under the store's ``objects/`` (temporary copies included)."""
    root = ObjectStore.beside(store).root
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def holds(store: Path, secret: bytes) -> bool:
    """Whether any object (or a copy being made) holds ``secret``."""
    return any(secret in p.read_bytes() for p in objects(store) if p.stat().st_size < 1 << 26)


def _repo(path: Path, program: str, ignore: str) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shutil.copy(PROGRAMS / program, path / "train.py")
    (path / ".gitignore").write_text(ignore)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "tiny program")
    return path


def _train(repo: Path, *args: str, **extra: str) -> str:
    proc = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=repo,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def wandb_run(base: Path) -> Path:
    """A finished offline run folder (``base/repo/wandb/offline-run-*``) written by the
    real wandb client; its ``files/model.pt`` is the link ``wandb.save`` leaves."""
    repo = _repo(base / "repo", "wandb_train.py", "wandb/\n*.pt\n")
    _train(repo, "--steps", "2")
    (run,) = (repo / "wandb").glob("offline-run-*")
    assert (run / "files" / "model.pt").is_symlink()
    return run


def mlflow_folder_run(base: Path) -> Path:
    """An ``mlruns/`` folder the real MLflow client wrote (one run of two steps)."""
    repo = _repo(base / "repo", "mlflow_train.py", "out/\nmlruns/\n")
    _train(repo, "--steps", "2", MLFLOW_TRACKING_URI=(repo / "mlruns").as_uri())
    return repo / "mlruns"


def mlflow_sqlite_run(home: Path) -> tuple[Path, str]:
    """A ``mlflow.db`` in the folder ``home`` (a stand-in for a home folder), written by
    the real MLflow client run from there (so its artifacts lie in ``home/mlruns``, the
    client's default); (the database, the run id)."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROGRAMS / "mlflow_train.py", home / "train.py")
    db = home / "mlflow.db"
    run_id = _train(home, "--steps", "2", MLFLOW_TRACKING_URI=f"sqlite:///{db}")
    return db, run_id
