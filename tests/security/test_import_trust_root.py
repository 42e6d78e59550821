"""R1 of the third trust round: an import's trust root is named, never guessed.

A run folder or a tracking database that sits in a home folder must not make the home
folder trusted: W&B saved-file links and MLflow artifact locations are followed only into
the tracker's own artifact folder (the W&B run folder's ``files/``; ``mlruns/`` or
``mlartifacts/``) or a folder the user named with ``--trust-root``.  Runs are written by
the real W&B and MLflow clients, then tampered with by hand; each test checks the exit
code and message, and that no byte of the stand-in key reaches the store or ``objects/``.
Everything lives in the test's own temporary folder (``home`` is a stand-in).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from storage.objects import ObjectStore
from storage.store import RunStore
from tests.support.tracker_runs import (
    ID_RSA,
    cli,
    holds,
    ledger_head,
    mlflow_sqlite_run,
    wandb_run,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wandb_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wandb_run(tmp_path_factory.mktemp("wandb"))


@pytest.fixture(scope="module")
def mlflow_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return mlflow_sqlite_run(tmp_path_factory.mktemp("mlflow") / "home")


def _fake_home(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_bytes(ID_RSA)
    return home, ssh / "id_rsa"


def _wandb_in_home(tmp_path: Path, run: Path) -> tuple[Path, Path, Path]:
    """A copy of the run at ``home/wandb/<run>`` whose saved file's link leads to
    ``home/.ssh/id_rsa``; (home, run folder, the key)."""
    home, key = _fake_home(tmp_path)
    folder = home / "wandb" / run.name
    shutil.copytree(run, folder, symlinks=True)
    link = folder / "files" / "model.pt"
    link.unlink()
    link.symlink_to(key)
    return home, folder, key


def _artifact(store: Path, stdout: str, path: str) -> object:
    (row,) = json.loads(stdout)["runs"]
    with RunStore(store) as s:
        arts = {a.path: a for a in s.manifest(row["run_id"]).outputs.artifacts}
    return arts[path]


def test_r1_a_wandb_run_in_a_home_folder_does_not_trust_the_home_folder(
    wandb_folder: Path, tmp_path: Path
) -> None:
    """``home/wandb/<run>/files/model.pt`` links to ``home/.ssh/id_rsa``: with no root
    named, the link is refused (listed without a hash, ``refused:`` printed naming the
    run's own ``files/`` and ``--trust-root``) and no byte of the key is kept."""
    home, folder, key = _wandb_in_home(tmp_path, wandb_folder)
    store = tmp_path / "store" / "runs.db"
    proc = cli(store, "import", "wandb", folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    link = folder / "files" / "model.pt"
    assert (
        f"refused: saved file {link} is a link to {key}, outside {folder / 'files'}: refused"
        in proc.stdout
    ), proc.stdout[-3000:]
    assert "--trust-root" in proc.stdout
    js = cli(store, "import", "wandb", folder, "--json")  # already there: its manifest
    art = _artifact(store, js.stdout, "model.pt")
    assert getattr(art, "sha256", "?") is None and getattr(art, "size_bytes", "?") is None
    assert ObjectStore.beside(store).get(hashlib.sha256(ID_RSA).hexdigest()) is None
    assert not holds(store, ID_RSA)
    with RunStore(store) as s:
        assert all(b"ID-RSA" not in (s.manifest(r.id).to_json().encode()) for r in s.list_runs())
    # a root named elsewhere does not widen it to the home folder either
    project = home / "project"
    project.mkdir()
    other = tmp_path / "store2" / "runs.db"
    named = cli(other, "import", "wandb", folder, "--trust-root", project)
    assert named.returncode == 0, named.stderr[-3000:]
    assert f"is a link to {key}, outside {project}, {folder / 'files'}" in named.stdout
    assert not holds(other, ID_RSA)


def test_r1_a_link_inside_the_run_s_own_files_folder_is_followed(
    wandb_folder: Path, tmp_path: Path
) -> None:
    """The run folder's own ``files/`` is a trust root: a saved file linked to a file W&B
    keeps there is hashed and kept without naming anything."""
    _home, folder, _key = _wandb_in_home(tmp_path, wandb_folder)
    real = folder / "files" / "kept" / "model.bin"
    real.parent.mkdir()
    real.write_bytes(b"weights kept by W&B in files/\n")
    link = folder / "files" / "model.pt"
    link.unlink()
    link.symlink_to(real)
    store = tmp_path / "store" / "runs.db"
    proc = cli(store, "import", "wandb", folder, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["runs"][0]["refused"] == []
    art = _artifact(store, proc.stdout, "model.pt")
    digest = hashlib.sha256(real.read_bytes()).hexdigest()
    assert getattr(art, "sha256", None) == digest
    kept = ObjectStore.beside(store).get(digest)
    assert kept is not None and kept.read_bytes() == real.read_bytes()


def _tampered_db(tmp_path: Path, db: Path, artifact_uri: str) -> Path:
    """A copy of ``db`` beside it (in the same home) whose run's ``artifact_uri`` is
    ``artifact_uri``."""
    copy = db.parent / f"tampered-{tmp_path.name}.db"
    shutil.copyfile(db, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE runs SET artifact_uri = ?", (artifact_uri,))
    return copy


def test_r1_an_mlflow_db_in_a_home_folder_does_not_trust_the_home_folder(
    mlflow_home: tuple[Path, str], tmp_path: Path
) -> None:
    """``home/mlflow.db`` whose run's ``artifact_uri`` is ``home/.ssh``: exit 2 naming the
    location and the store's own artifact folder, nothing stored, no key byte kept;
    the same run untampered imports from ``home/mlruns`` (the client's default folder)."""
    db, run_id = mlflow_home
    home = db.parent
    ssh = home / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "id_rsa").write_bytes(ID_RSA)
    tampered = _tampered_db(tmp_path, db, str(ssh))
    store = tmp_path / "store" / "runs.db"
    seed = cli(store, "import", "mlflow", f"sqlite:///{db}", "--json")  # the untampered run
    assert seed.returncode == 0, seed.stderr[-3000:]
    (row,) = json.loads(seed.stdout)["runs"]
    assert row["status"] == "imported" and row["refused"] == []
    with RunStore(store) as s:
        arts = {a.path for a in s.manifest(row["run_id"]).outputs.artifacts}
    assert arts == {"ckpt/model.pt", "notes.txt"}
    other = tmp_path / "store2" / "runs.db"
    head = ledger_head(other)
    proc = cli(other, "import", "mlflow", f"sqlite:///{tampered}")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert (
        f"mlflow run {run_id}: its artifact location {ssh} is outside the tracking store's"
        f" artifact root ({home / 'mlruns'}): refused" in proc.stderr
    ), proc.stderr[-3000:]
    assert "--trust-root" in proc.stderr
    assert ledger_head(other) == head
    assert not holds(other, ID_RSA)


def test_r1_an_mlruns_link_beside_the_db_is_no_trust_root(
    mlflow_home: tuple[Path, str], tmp_path: Path
) -> None:
    """``home/mlruns`` swapped for a link to ``home/.ssh`` (the folder beside the database
    is from elsewhere too): not a trust root, so the artifact location under it is
    refused (exit 2) and no key byte is kept."""
    db, _run_id = mlflow_home
    home = tmp_path / "home2"
    home.mkdir()
    shutil.copyfile(db, home / "mlflow.db")
    ssh = home / ".ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_bytes(ID_RSA)
    os.symlink(ssh, home / "mlruns", target_is_directory=True)
    tampered = _tampered_db(tmp_path, home / "mlflow.db", str(home / "mlruns"))
    store = tmp_path / "store" / "runs.db"
    proc = cli(store, "import", "mlflow", f"sqlite:///{tampered}")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert f"its artifact location {home / 'mlruns'} is outside" in proc.stderr, proc.stderr
    assert ledger_head(store) is None or not RunStore(store).list_runs()
    assert not holds(store, ID_RSA)
