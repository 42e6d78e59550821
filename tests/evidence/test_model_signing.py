"""The bundle's OpenSSF model signature, checked by the real ``model_signing verify key``
over the model folder ``export --model-files`` writes, and by ``replay-tui verify``.

The run is a real recorded training run (the launcher, the numpy-only trainer's tiny
model, its two safetensors checkpoints kept in the object store): what is signed is the
exported folder of files, whatever framework wrote them, so no torch start is needed."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replay_tui.evidence.keys import generate, load_public_key
from replay_tui.evidence.modelsig import MODEL_PREDICATE_TYPE, MODEL_SIG_NAME
from replay_tui.evidence.verify import verify_bundle
from storage.manifest import canonical_json
from tests.support.training import NUMPY_SCRIPT, QUICK, make_repo, record_example, replay_tui

MODEL_SIGNING = str(Path(sys.executable).parent / "model_signing")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("model")
    repo = make_repo(base / "repo", numpy=True)
    store = base / "store" / "runs.db"
    out = record_example(store, repo, *QUICK, script=NUMPY_SCRIPT)
    assert out["_returncode"] == 0, out["_stderr"][-3000:]
    return store, str(out["run_id"])


@pytest.fixture(scope="module")
def exported(
    recorded: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, Path]:
    """(bundle, model folder, public key): signed with keygen's default (ECDSA P-256)."""
    store, run_id = recorded
    d = tmp_path_factory.mktemp("exported")
    r = replay_tui(store, "keygen", "--out", d / "team.key")
    assert r.returncode == 0, r.stderr
    r = replay_tui(
        store, "export", run_id, "--out", d / "bundle", "--sign", d / "team.key",
        "--model-files", d / "model",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "model_signing verify key --signature" in r.stdout
    return d / "bundle", d / "model", d / "team.pub"


def model_signing_verify(sig: Path, pub: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODEL_SIGNING, "verify", "key", "--signature", str(sig), "--public_key", str(pub),
         str(folder)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_model_signing_verifies_the_exported_model_folder(
    exported: tuple[Path, Path, Path],
) -> None:
    bundle, folder, pub = exported
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert files == sorted(a["path"] for a in manifest["outputs"]["artifacts"] if a["sha256"])
    assert len(files) >= 2  # a checkpoint and the other outputs
    r = model_signing_verify(bundle / MODEL_SIG_NAME, pub, folder)
    assert r.returncode == 0 and "Verification succeeded" in r.stdout + r.stderr, r.stderr
    sig = json.loads((bundle / MODEL_SIG_NAME).read_bytes())
    stmt = json.loads(base64.b64decode(sig["dsseEnvelope"]["payload"]))
    assert stmt["predicateType"] == MODEL_PREDICATE_TYPE
    chk = verify_bundle(bundle, public_key=load_public_key(pub))
    assert chk.ok, chk.problems
    (st,) = [s for s in chk.statements if s.name == MODEL_SIG_NAME]
    assert st.present and st.checked and f"{len(files)} model file(s)" in st.detail


def _copy(folder: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "model-copy"
    shutil.copytree(folder, dst)
    return dst


def test_a_tampered_model_file_fails_model_signing(
    exported: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    bundle, folder, pub = exported
    copy = _copy(folder, tmp_path)
    victim = max(copy.rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else -1)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    r = model_signing_verify(bundle / MODEL_SIG_NAME, pub, copy)
    assert r.returncode != 0 and "Verification succeeded" not in r.stdout + r.stderr


def test_an_added_or_removed_model_file_fails_model_signing(
    exported: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    bundle, folder, pub = exported
    copy = _copy(folder, tmp_path)
    (copy / "extra.bin").write_bytes(b"not trained")
    assert model_signing_verify(bundle / MODEL_SIG_NAME, pub, copy).returncode != 0
    (copy / "extra.bin").unlink()
    next(p for p in copy.rglob("*") if p.is_file()).unlink()
    assert model_signing_verify(bundle / MODEL_SIG_NAME, pub, copy).returncode != 0


def _edit_signed_list(sig_path: Path, edit: Any) -> None:
    """Edit the signed file list in place, keeping the signature (a forgery)."""
    sig = json.loads(sig_path.read_bytes())
    stmt = json.loads(base64.b64decode(sig["dsseEnvelope"]["payload"]))
    edit(stmt)
    sig["dsseEnvelope"]["payload"] = base64.b64encode(canonical_json(stmt)).decode()
    sig_path.write_bytes(canonical_json(sig) + b"\n")


def test_a_tampered_signature_fails_model_signing_and_verify(
    exported: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    bundle, folder, pub = exported
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    copy = _copy(folder, tmp_path)
    victim = next(p for p in sorted(copy.rglob("*")) if p.is_file())
    victim.write_bytes(b"swapped weights")
    name = victim.relative_to(copy).as_posix()

    def swap(stmt: dict[str, Any]) -> None:  # name the swapped file's hash instead
        for r in stmt["predicate"]["resources"]:
            if r["name"] == name:
                r["digest"] = hashlib.sha256(b"swapped weights").hexdigest()

    _edit_signed_list(b / MODEL_SIG_NAME, swap)
    r = model_signing_verify(b / MODEL_SIG_NAME, pub, copy)
    assert r.returncode != 0 and "Verification succeeded" not in r.stdout + r.stderr
    chk = verify_bundle(b, public_key=load_public_key(pub))
    assert [(p.file, p.kind) for p in chk.problems] == [
        (MODEL_SIG_NAME, "signature"),
        (MODEL_SIG_NAME, "changed"),  # SHA256SUMS lists other bytes
    ]


def test_another_key_fails_model_signing(exported: tuple[Path, Path, Path], tmp_path: Path) -> None:
    bundle, folder, _ = exported
    other = generate(tmp_path / "other.key")
    r = model_signing_verify(bundle / MODEL_SIG_NAME, other.public_path, folder)
    assert r.returncode != 0 and "Verification succeeded" not in r.stdout + r.stderr


def test_an_ed25519_bundle_has_no_model_signature_and_says_why(
    recorded: tuple[Path, str], tmp_path: Path
) -> None:
    store, run_id = recorded
    pair = generate(tmp_path / "ed.key", kind="ed25519")
    r = replay_tui(store, "export", run_id, "--out", tmp_path / "b", "--sign", pair.private_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "b" / MODEL_SIG_NAME).exists()
    v = replay_tui(store, "verify", tmp_path / "b", "--key", pair.public_path)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "model_signing takes ECDSA keys only" in v.stdout


def test_model_files_go_only_into_a_new_folder(recorded: tuple[Path, str], tmp_path: Path) -> None:
    store, run_id = recorded
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    r = replay_tui(store, "export", run_id, "--out", tmp_path / "b", "--model-files", used)
    assert r.returncode == 2 and "not a new or empty folder" in r.stderr
    assert not (tmp_path / "b").exists()  # refused before the bundle was written
