"""The bundle's OpenSSF model signature (``model.sig``): what ``model_signing verify key``
reads.

The signature is a Sigstore bundle (v0.3 JSON) holding a DSSE envelope of an in-toto
Statement v1 with predicate type ``https://model_signing/signature/v1.0``: its predicate
lists each of the run's model files (every hashed artifact: the checkpoints and the other
outputs) by name, ``sha256`` and digest, with the serialization ``model_signing`` uses for
a folder of files (method ``files``, no symlinks, its default ignored paths); its one
subject is the model, named after the run, whose digest is the sha256 over the files'
digests in name order.  The envelope is signed with the bundle's key, over the DSSE
pre-authentication encoding, ECDSA with SHA-256; the bundle's ``verificationMaterial``
names the key by ``publicKey.hint``, the sha256 of its PEM SubjectPublicKeyInfo, as
``model_signing`` writes and checks it.  ``model_signing`` signs with ECDSA keys only, so
an Ed25519-signed bundle has no model signature.

The files themselves are not in the bundle: ``export --model-files DIR`` writes the run's
copies from the object store into a folder, each checked against its recorded hash, and
``model_signing verify key --signature BUNDLE/model.sig --public_key KEY.pub DIR``
checks them.  ``verify`` checks the signature offline against the bundle's trusted key and
the files it names against the signed manifest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from replay_tui.door import Refused, open_under
from replay_tui.errors import BadInput
from replay_tui.evidence.statement import PAYLOAD_TYPE, STATEMENT_TYPE
from storage.manifest import RunManifest, canonical_json

MODEL_SIG_NAME = "model.sig"
MODEL_PREDICATE_TYPE = "https://model_signing/signature/v1.0"
SIGSTORE_BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IGNORE_PATHS = [".github", ".git", ".gitattributes", ".gitignore"]  # model_signing's own
MAX_MODEL_SIG_BYTES = 64 * 1024 * 1024


class ModelSignatureError(ValueError):
    """The model signature is malformed, made with another key, or does not verify;
    ``kind`` says which (``malformed``, ``signature``, ``changed``: as ``verify`` reports)."""

    def __init__(self, message: str, kind: str = "malformed") -> None:
        super().__init__(message)
        self.kind = kind


def model_files(m: RunManifest) -> list[tuple[str, str]]:
    """``(name, sha256)`` of each model file the signature covers, in name order: every
    hashed artifact whose path is not one ``model_signing`` ignores."""
    out = {
        a.path: a.sha256
        for a in m.outputs.artifacts
        if a.sha256 and PurePosixPath(a.path).parts[0] not in IGNORE_PATHS
    }
    return sorted(out.items())


def _files_of(artifacts: Any) -> list[tuple[str, str]]:
    """:func:`model_files` of a manifest's ``outputs.artifacts`` as JSON (the signed copy
    in the bundle's statement)."""
    out: dict[str, str] = {}
    for a in artifacts if isinstance(artifacts, list) else []:
        if not isinstance(a, dict):
            continue
        path, sha = a.get("path"), a.get("sha256")
        if not (isinstance(path, str) and isinstance(sha, str) and path):
            continue
        if PurePosixPath(path).parts[0] not in IGNORE_PATHS:
            out[path] = sha
    return sorted(out.items())


def root_digest(files: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for _, digest in files:
        h.update(bytes.fromhex(digest))
    return h.hexdigest()


def model_statement(name: str, files: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": root_digest(files)}}],
        "predicateType": MODEL_PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": False,
                "ignore_paths": list(IGNORE_PATHS),
            },
            "resources": [{"name": n, "algorithm": "sha256", "digest": d} for n, d in files],
        },
    }


def pae(payload: bytes) -> bytes:
    t = PAYLOAD_TYPE.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def key_hint(public_key: ec.EllipticCurvePublicKey) -> str:
    pem = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def sign_model(m: RunManifest, private_key: ec.EllipticCurvePrivateKey) -> bytes | None:
    """The bytes of ``model.sig`` for the run's model files; None when it has none."""
    files = model_files(m)
    if not files:
        return None
    payload = canonical_json(model_statement(m.name or m.run_id, files))
    sig = private_key.sign(pae(payload), ec.ECDSA(hashes.SHA256()))
    bundle = {
        "mediaType": SIGSTORE_BUNDLE_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": key_hint(private_key.public_key())},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
        },
    }
    return canonical_json(bundle) + b"\n"


def _get(d: Any, key: str) -> Any:
    return d.get(key) if isinstance(d, dict) else None


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ModelSignatureError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ModelSignatureError(f"{what} is not base64") from None


def check_model_signature(raw: bytes, public_key: ec.EllipticCurvePublicKey, artifacts: Any) -> int:
    """Check ``model.sig`` (its bytes ``raw``): the form this tool writes, signed by
    ``public_key``, naming exactly the model files of the signed manifest's
    ``artifacts``.  Returns how many files it names; raises :class:`ModelSignatureError`."""
    if len(raw) > MAX_MODEL_SIG_BYTES:
        raise ModelSignatureError(f"{len(raw)} bytes: larger than any signature written here")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelSignatureError(f"not JSON: {type(e).__name__}") from None
    if not isinstance(data, dict) or canonical_json(data) + b"\n" != raw:
        raise ModelSignatureError(
            "bytes differ from the signature's canonical form (edited)", "changed"
        )
    if data.get("mediaType") != SIGSTORE_BUNDLE_TYPE:
        raise ModelSignatureError(f"mediaType is not {SIGSTORE_BUNDLE_TYPE}")
    env = data.get("dsseEnvelope")
    if not isinstance(env, dict) or env.get("payloadType") != PAYLOAD_TYPE:
        raise ModelSignatureError("no DSSE envelope of an in-toto statement")
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        raise ModelSignatureError("a model signature holds exactly one signature", "signature")
    material = data.get("verificationMaterial")
    hint = _get(_get(material, "publicKey"), "hint")
    if hint != key_hint(public_key):
        raise ModelSignatureError(
            "made with another key (its publicKey.hint is not the key's)", "signature"
        )
    payload = _b64(env.get("payload"), "the payload")
    try:
        sig = _b64(sigs[0].get("sig"), "the signature")
        public_key.verify(sig, pae(payload), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ModelSignatureError(
            "the signature does not verify: the file list was altered", "signature"
        ) from None
    try:
        stmt = json.loads(payload)
    except (ValueError, RecursionError) as e:
        raise ModelSignatureError(f"the payload is not JSON: {type(e).__name__}") from None
    files = _files_of(artifacts)
    want = model_statement("", files)
    if not isinstance(stmt, dict) or stmt.get("predicateType") != MODEL_PREDICATE_TYPE:
        raise ModelSignatureError(f"predicateType is not {MODEL_PREDICATE_TYPE}")
    if stmt.get("predicate") != want["predicate"]:
        raise ModelSignatureError("the files it names are not the run's model files", "changed")
    subject = stmt.get("subject")
    if not isinstance(subject, list) or len(subject) != 1 or not isinstance(subject[0], dict):
        raise ModelSignatureError("a model signature has exactly one subject")
    if subject[0].get("digest") != want["subject"][0]["digest"]:
        raise ModelSignatureError("its subject digest is not that of the files it names", "changed")
    return len(files)


# -- the model folder ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFolder:
    path: Path
    files: int
    bytes: int


def model_target(dest: Path) -> Path:
    """``dest`` made absolute, refused unless it is a new or empty folder in a folder that
    exists (checked before the bundle is written, too)."""
    dest = Path(os.path.abspath(dest))
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise BadInput(f"--model-files {dest} is not a new or empty folder")
    if not dest.parent.is_dir():
        raise BadInput(f"--model-files {dest}: folder {dest.parent} does not exist")
    return dest


def export_model_files(objects_root: Path, m: RunManifest, dest: Path) -> ModelFolder:
    """Write the run's model files (its copies kept in the object store) into the new or
    empty folder ``dest`` under their recorded paths, each checked against its recorded
    sha256 as it is copied: the folder ``model_signing verify`` checks."""
    files = model_files(m)
    if not files:
        raise BadInput(f"run {m.run_id} has no hashed artifacts: no model files to export")
    dest = model_target(dest)
    dest.mkdir(parents=False, exist_ok=True)
    total = 0
    for name, sha in files:
        target = dest.joinpath(*PurePosixPath(name).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        try:
            with open_under(objects_root, f"{sha[:2]}/{sha[2:]}", "run output") as src:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as out:
                    for chunk in src.chunks():
                        h.update(chunk)
                        out.write(chunk)
                        total += len(chunk)
        except Refused as e:
            target.unlink(missing_ok=True)
            raise BadInput(
                f"model file {name}: the store's copy cannot be read: {e.message}"
            ) from None
        if h.hexdigest() != sha:
            target.unlink()
            raise BadInput(f"model file {name}: the store's copy no longer has its recorded hash")
        os.chmod(target, 0o644)
    return ModelFolder(dest, len(files), total)
