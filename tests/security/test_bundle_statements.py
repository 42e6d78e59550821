"""Attacks on the bundle members ``verify`` reads beside the main statement: the SLSA
provenance envelope and the OpenSSF model signature.  Each forged, swapped, re-signed,
linked, special or hostile member makes ``verify`` fail, naming the member, and never
hangs or crashes it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from replay_tui.evidence import keys
from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.modelsig import MODEL_SIG_NAME, key_hint, pae
from replay_tui.evidence.slsa import SLSA_NAME
from replay_tui.evidence.statement import envelope_bytes, read_envelope
from replay_tui.evidence.verify import BundleCheck, verify_bundle
from storage.manifest import canonical_json, manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.support.bundles import copy_bundle


def _check(b: Path, pub: Path) -> BundleCheck:
    return verify_bundle(b, public_key=keys.load_public_key(pub))


def _problems(chk: BundleCheck, name: str) -> list[str]:
    return [p.kind for p in chk.problems if p.file == name]


def _fails_on(b: Path, pub: Path, name: str, kind: str) -> BundleCheck:
    chk = _check(b, pub)
    assert not chk.ok
    assert kind in _problems(chk, name), chk.problems
    (st,) = [s for s in chk.statements if s.name == name]
    assert not st.checked, st
    return chk


def _resign(path: Path, key: keys.PrivateKey, edit: Callable[[dict[str, Any]], None]) -> None:
    """Replace the envelope at ``path`` by one over an edited statement, signed by ``key``."""
    env = read_envelope(path.read_bytes())
    stmt = json.loads(env.payload)
    edit(stmt)
    new = Envelope(canonical_json(stmt), env.payload_type, {})
    pub = key.public_key()
    new.sign(CryptoSigner(key, SSlibKey.from_crypto(pub, keys.key_id(pub), keys.scheme(pub))))
    path.write_bytes(envelope_bytes(new))


def _nothing(stmt: dict[str, Any]) -> None:
    pass


# -- the SLSA provenance envelope ----------------------------------------------------------


def test_slsa_resigned_by_another_key_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)
    mallory = keys.generate(tmp_path / "m.key")

    def other_image(stmt: dict[str, Any]) -> None:
        stmt["predicate"]["buildDefinition"]["resolvedDependencies"][1]["digest"] = {
            "sha256": "0" * 64
        }

    _resign(b / SLSA_NAME, keys.load_private_key(mallory.private_path), other_image)
    _fails_on(b, keypair[1], SLSA_NAME, "signature")


def _copied_slsa(bundle: Path, tmp_path: Path) -> tuple[Path, Envelope]:
    """A copy of ``bundle`` and its SLSA envelope, as read from the copy."""
    b = copy_bundle(bundle, tmp_path)
    return b, read_envelope((b / SLSA_NAME).read_bytes())


def test_slsa_with_an_extra_signature_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b, env = _copied_slsa(bundle, tmp_path)
    mallory = keys.load_private_key(keys.generate(tmp_path / "m.key").private_path)
    pub = mallory.public_key()
    env.sign(CryptoSigner(mallory, SSlibKey.from_crypto(pub, keys.key_id(pub), keys.scheme(pub))))
    (b / SLSA_NAME).write_bytes(envelope_bytes(env))
    _fails_on(b, keypair[1], SLSA_NAME, "signature")


def test_slsa_stripped_of_its_signature_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b, env = _copied_slsa(bundle, tmp_path)
    (b / SLSA_NAME).write_bytes(envelope_bytes(Envelope(env.payload, env.payload_type, {})))
    _fails_on(b, keypair[1], SLSA_NAME, "signature")


def test_slsa_of_another_run_signed_by_the_same_key_fails(
    store_path: Path,
    make_manifest: MakeManifest,
    bundle: Path,
    keypair: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    """A genuine SLSA statement of another run, by the same signer, swapped in: its
    subjects and run are not the bundle's (and SHA256SUMS lists other bytes)."""
    other = make_manifest(index=7)
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(other))
        export_bundle(store, other["run_id"], tmp_path / "other", key_path=keypair[0])
    b = copy_bundle(bundle, tmp_path)
    shutil.copy(tmp_path / "other" / SLSA_NAME, b / SLSA_NAME)
    chk = _fails_on(b, keypair[1], SLSA_NAME, "changed")
    assert any("subjects" in p.message or "invocationId" in p.message for p in chk.problems)


def test_slsa_with_another_predicate_type_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)

    def retype(stmt: dict[str, Any]) -> None:
        stmt["predicateType"] = "https://slsa.dev/provenance/v0.2"

    _resign(b / SLSA_NAME, keys.load_private_key(keypair[0]), retype)  # the signer's own key
    _fails_on(b, keypair[1], SLSA_NAME, "malformed")


@pytest.mark.parametrize("name", [SLSA_NAME, MODEL_SIG_NAME])
def test_a_member_swapped_for_a_symlink_is_not_followed(
    name: str, bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)
    real = tmp_path / "elsewhere"
    shutil.copy(b / name, real)
    (b / name).unlink()
    os.symlink(real, b / name)
    chk = _check(b, keypair[1])
    assert not chk.ok and "added" in _problems(chk, name)
    (st,) = [s for s in chk.statements if s.name == name]
    assert not st.checked


@pytest.mark.parametrize("name", [SLSA_NAME, MODEL_SIG_NAME])
def test_a_member_swapped_for_a_fifo_never_hangs_verify(
    name: str, bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)
    (b / name).unlink()
    os.mkfifo(b / name)
    done: list[BundleCheck] = []
    t = threading.Thread(target=lambda: done.append(_check(b, keypair[1])), daemon=True)
    t.start()
    t.join(timeout=60)  # a bound on a hang, not a timing threshold: it returns at once
    assert done, "verify waited on a FIFO"
    assert not done[0].ok and _problems(done[0], name)


@pytest.mark.parametrize("name", [SLSA_NAME, MODEL_SIG_NAME])
def test_deeply_nested_json_is_refused_not_a_crash(
    name: str, bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)
    (b / name).write_bytes(b"[" * 200_000 + b"]" * 200_000 + b"\n")
    chk = _check(b, keypair[1])
    assert not chk.ok and "malformed" in _problems(chk, name), chk.problems
    (st,) = [s for s in chk.statements if s.name == name]
    assert not st.checked


# -- the model signature -------------------------------------------------------------------


def _edit_model_sig(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    sig = json.loads(path.read_bytes())
    edit(sig)
    path.write_bytes(canonical_json(sig) + b"\n")


def _payload(sig: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(base64.b64decode(sig["dsseEnvelope"]["payload"]))
    return out


def test_a_model_signature_by_another_key_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    """Mallory signs her own file list with her key, hint and all: not the bundle's key."""
    b = copy_bundle(bundle, tmp_path)
    mallory = ec.generate_private_key(ec.SECP256R1())

    def forge(sig: dict[str, Any]) -> None:
        stmt = _payload(sig)
        stmt["predicate"]["resources"][0]["digest"] = "0" * 64
        payload = canonical_json(stmt)
        s = mallory.sign(pae(payload), ec.ECDSA(hashes.SHA256()))
        sig["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
        sig["dsseEnvelope"]["signatures"] = [{"sig": base64.b64encode(s).decode(), "keyid": ""}]
        sig["verificationMaterial"]["publicKey"]["hint"] = key_hint(mallory.public_key())

    _edit_model_sig(b / MODEL_SIG_NAME, forge)
    _fails_on(b, keypair[1], MODEL_SIG_NAME, "signature")


def test_a_model_signature_signed_by_the_right_key_over_other_files_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    """Even the signer's own key cannot make ``verify`` accept a file list that is not
    the signed manifest's (a model signature of another model, swapped in)."""
    b = copy_bundle(bundle, tmp_path)
    key = keys.load_private_key(keypair[0])
    assert isinstance(key, ec.EllipticCurvePrivateKey)

    def other_model(sig: dict[str, Any]) -> None:
        stmt = _payload(sig)
        stmt["predicate"]["resources"] = stmt["predicate"]["resources"][:1]
        payload = canonical_json(stmt)
        s = key.sign(pae(payload), ec.ECDSA(hashes.SHA256()))
        sig["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
        sig["dsseEnvelope"]["signatures"] = [{"sig": base64.b64encode(s).decode(), "keyid": ""}]

    _edit_model_sig(b / MODEL_SIG_NAME, other_model)
    _fails_on(b, keypair[1], MODEL_SIG_NAME, "changed")


def test_a_model_signature_with_two_signatures_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)

    def twice(sig: dict[str, Any]) -> None:
        sig["dsseEnvelope"]["signatures"] *= 2

    _edit_model_sig(b / MODEL_SIG_NAME, twice)
    _fails_on(b, keypair[1], MODEL_SIG_NAME, "signature")


def test_a_model_signature_not_in_canonical_form_fails(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)
    sig = json.loads((b / MODEL_SIG_NAME).read_bytes())
    (b / MODEL_SIG_NAME).write_text(json.dumps(sig, indent=1))
    _fails_on(b, keypair[1], MODEL_SIG_NAME, "changed")


def test_a_model_signature_added_to_an_ed25519_bundle_fails(
    replayed_store: tuple[Path, str], bundle: Path, tmp_path: Path
) -> None:
    store_path, run_id = replayed_store
    pair = keys.generate(tmp_path / "ed.key", kind="ed25519")
    with RunStore(store_path) as store:
        export_bundle(store, run_id, tmp_path / "ed", key_path=pair.private_path)
    shutil.copy(bundle / MODEL_SIG_NAME, tmp_path / "ed" / MODEL_SIG_NAME)
    chk = _check(tmp_path / "ed", pair.public_path)
    assert not chk.ok and "signature" in _problems(chk, MODEL_SIG_NAME)
