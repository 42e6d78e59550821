"""Bundles and keys of earlier versions: they verify as they did.

``data/bundle-v1`` was exported, signed with the Ed25519 key whose public half is
``data/bundle-v1.pub``, by the version before SLSA provenance, ECDSA keys and the other
members existed.  Its bytes are kept as they were written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.keys import generate, load_public_key
from replay_tui.evidence.verify import verify_bundle
from storage.store import RunStore
from tests.conftest import RunCli

DATA = Path(__file__).parent / "data"
OLD = DATA / "bundle-v1"
OLD_KEY = DATA / "bundle-v1.pub"


def test_a_bundle_of_the_previous_version_still_verifies(cli: RunCli) -> None:
    chk = verify_bundle(OLD, public_key=load_public_key(OLD_KEY))
    assert chk.ok, chk.problems
    assert chk.trusted and chk.verdict == "IDENTICAL" and chk.files_checked == 8
    r = cli("verify", OLD, "--key", OLD_KEY, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["ok"] is True


def test_the_previous_bundle_tampered_still_fails(tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(OLD, b)
    p = b / "gaps.json"
    p.write_bytes(p.read_bytes().replace(b"[]", b"[{}]", 1))
    chk = verify_bundle(b, public_key=load_public_key(OLD_KEY))
    assert [(x.file, x.kind) for x in chk.problems] == [("gaps.json", "changed")]


def test_an_ed25519_key_still_signs_a_bundle_that_verifies(
    replayed_store: tuple[Path, str], tmp_path: Path
) -> None:
    store_path, run_id = replayed_store
    pair = generate(tmp_path / "old.key", kind="ed25519")
    out = tmp_path / "bundle"
    with RunStore(store_path) as store:
        res = export_bundle(store, run_id, out, key_path=pair.private_path)
    assert res.signed and res.key_id == pair.key_id
    chk = verify_bundle(out, public_key=load_public_key(pair.public_path))
    assert chk.ok, chk.problems
    assert chk.key_id == pair.key_id
