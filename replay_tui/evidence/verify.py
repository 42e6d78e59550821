"""Check a bundle offline: every byte of every file, and the signature.

``SHA256SUMS`` names every file but itself and the envelope; the signed Statement in the
envelope names the digest of ``SHA256SUMS``.  So a changed, missing or added file, an
edited checksum list or an edited envelope each show up, and each problem names its file.
Without ``--key`` the signature is checked against the public key inside the bundle, which
proves the bundle is intact but not who made it: pass the key you trust.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope

from replay_tui.errors import BadInput, ReplayTuiError
from replay_tui.evidence import checksums, keys
from replay_tui.evidence.statement import (
    ENVELOPE_NAME,
    EnvelopeError,
    SignatureError,
    read_envelope,
    signer_ids,
    statement_of,
    verify_signature,
)
from storage.manifest import sha256_hex

ProblemKind = Literal["changed", "missing", "added", "malformed", "signature"]
KeySource = Literal["given", "bundle"]


@dataclass(frozen=True)
class Problem:
    file: str
    kind: ProblemKind
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "kind": self.kind, "message": self.message}

    def text(self) -> str:
        return f"{self.kind}: {self.file}: {self.message}"


@dataclass
class BundleCheck:
    path: Path
    files_checked: int = 0
    signed: bool = False
    key_id: str | None = None
    key_source: KeySource | None = None
    run_id: str | None = None
    verdict: str | None = None
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "path": str(self.path),
            "run_id": self.run_id,
            "verdict": self.verdict,
            "files_checked": self.files_checked,
            "signed": self.signed,
            "key_id": self.key_id,
            "key_source": self.key_source,
            "problems": [p.to_dict() for p in self.problems],
            "notes": self.notes,
        }


def _dig(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def verify_bundle(path: Path, *, public_key: Ed25519PublicKey | None = None) -> BundleCheck:
    """Re-hash every file and check the signature (with ``public_key`` when given)."""
    if not path.is_dir():
        raise BadInput(f"{path} is not a bundle folder")
    chk = BundleCheck(path)
    bad = chk.problems.append
    files, odd = checksums.bundle_files(path)
    for name in odd:
        bad(Problem(name, "added", "not a regular file; a bundle holds only files"))
    # -- the envelope: its form, then its signature, then the statement it carries
    stmt: dict[str, Any] | None = None
    raw_env = _read(path / ENVELOPE_NAME)
    if raw_env is None:
        bad(Problem(ENVELOPE_NAME, "missing", "the signed statement is gone"))
    else:
        try:
            env = read_envelope(raw_env)
        except EnvelopeError as e:
            bad(Problem(ENVELOPE_NAME, "malformed", str(e)))
        else:
            if _check_signature(path, env, public_key, chk):
                try:
                    stmt = statement_of(env)
                except EnvelopeError as e:
                    bad(Problem(ENVELOPE_NAME, "malformed", str(e)))
    predicate: dict[str, Any] = stmt["predicate"] if stmt else {}
    run_id = predicate.get("run_id")
    chk.run_id = run_id if isinstance(run_id, str) else None
    verdict = _dig(predicate, "replay", "verdict")
    chk.verdict = verdict if isinstance(verdict, str) else None
    # -- the checksum list, against the statement
    raw_sums = _read(path / checksums.SUMS_NAME)
    listed: dict[str, str] = {}
    if raw_sums is None:
        bad(Problem(checksums.SUMS_NAME, "missing", "the checksum list is gone"))
    else:
        want = _dig(predicate, "bundle", "checksums", "sha256")
        if stmt is not None and want != sha256_hex(raw_sums):
            bad(
                Problem(
                    checksums.SUMS_NAME,
                    "changed",
                    "its sha256 is not the one the signed statement names",
                )
            )
        try:
            listed = checksums.parse(raw_sums)
        except checksums.ChecksumFormatError as e:
            bad(Problem(checksums.SUMS_NAME, "malformed", str(e)))
    # -- every file
    present = set(files)
    reported = {p.file for p in chk.problems}
    for name, digest in sorted(listed.items()):
        if name not in present:
            if name not in reported:
                bad(Problem(name, "missing", "listed in SHA256SUMS but not in the bundle"))
            continue
        chk.files_checked += 1
        actual = checksums.hash_files(path, [name])[name]
        if actual != digest:
            bad(Problem(name, "changed", f"sha256 is {actual[:16]}, listed as {digest[:16]}"))
    for name in sorted(present - set(listed) - {checksums.SUMS_NAME, ENVELOPE_NAME}):
        bad(Problem(name, "added", "not listed in SHA256SUMS"))
    return chk


def _check_signature(
    path: Path, env: Envelope, public_key: Ed25519PublicKey | None, chk: BundleCheck
) -> bool:
    """Check the envelope's signature; False when its statement cannot be trusted."""
    chk.signed = bool(signer_ids(env))
    if public_key is None and not chk.signed:
        chk.notes.append("the bundle is not signed: its checksums catch accidents, not forgery")
        return True
    if public_key is None:
        public_key = _bundled_key(path, chk)
        if public_key is None:
            return False
        chk.key_source = "bundle"
    else:
        chk.key_source = "given"
    chk.key_id = keys.key_id(public_key)
    if chk.key_source == "bundle" and chk.key_id not in signer_ids(env):
        chk.problems.append(
            Problem(keys.BUNDLE_KEY_NAME, "changed", "it is not the key that signed the bundle")
        )
        return False
    try:
        verify_signature(env, public_key)
    except SignatureError as e:
        chk.problems.append(Problem(ENVELOPE_NAME, "signature", str(e)))
        return False
    if chk.key_source == "bundle":
        chk.notes.append(
            f"signature checked with the key inside the bundle ({chk.key_id[:16]}): this shows"
            " the bundle is intact, not who made it; pass --key with the key you trust"
        )
    return True


def _bundled_key(path: Path, chk: BundleCheck) -> Ed25519PublicKey | None:
    raw = _read(path / keys.BUNDLE_KEY_NAME)
    if raw is None:
        chk.problems.append(
            Problem(keys.BUNDLE_KEY_NAME, "missing", "signed, but no public key to check it with")
        )
        return None
    try:
        return keys.parse_public_key(raw, keys.BUNDLE_KEY_NAME)
    except ReplayTuiError as e:
        chk.problems.append(Problem(keys.BUNDLE_KEY_NAME, "malformed", e.message))
        return None
