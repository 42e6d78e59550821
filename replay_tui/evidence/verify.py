"""Check a bundle offline: every byte of every file, and the signature.

``SHA256SUMS`` names every file but itself and the envelope; the signed Statement in the
envelope names the digest of ``SHA256SUMS``.  So a changed, missing or added file, an
edited checksum list or an edited envelope each show up, and each problem names its file.
The signature counts only when it verifies against a key the user trusts (``--key``, or
the trusted-keys file): a forger can re-sign a forged bundle with a key of their own and
put that key inside it.  Checking with the key inside the bundle needs an explicit
``allow_embedded_key`` and is reported as such, with its fingerprint; an unsigned bundle
needs ``allow_unsigned``.  A signature beside the trusted one, an added empty folder, a
link or a special file are each reported.  Every file is opened through
``replay_tui.door`` under the bundle folder (a link is never followed, a FIFO never
waited on) and read bounded (``LIMITS["bundle file"]``, a run log ``LIMITS["run log"]``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope

from replay_tui.door import LIMITS, Refused, open_under, read_under
from replay_tui.errors import BadInput, ReplayTuiError
from replay_tui.evidence import checksums, keys, modelsig
from replay_tui.evidence.slsa import SLSA_NAME, SLSA_PREDICATE_TYPE
from replay_tui.evidence.statement import (
    ENVELOPE_NAME,
    PREDICATE_TYPE,
    EnvelopeError,
    SignatureError,
    read_envelope,
    signer_ids,
    statement_of,
    verify_signature,
)
from replay_tui.safety import escape_control
from storage.manifest import sha256_hex
from storage.wire import Wire, wire

MAX_SUMS_BYTES = 16 * 1024 * 1024
MAX_ENVELOPE_READ = 64 * 1024 * 1024

ProblemKind = Literal["changed", "missing", "added", "malformed", "signature"]
KeySource = Literal["given", "bundle"]
NOT_TRUSTED = "signature not checked against a trusted key"


@dataclass(frozen=True)
class Problem(Wire):
    file: str
    kind: ProblemKind
    message: str

    def text(self) -> str:
        return escape_control(f"{self.kind}: {self.file}: {self.message}")


@dataclass(frozen=True)
class StatementCheck(Wire):
    """One signed statement a bundle carries (or lacks), and what ``verify`` made of it."""

    name: str  # the bundle member
    predicate_type: str
    present: bool
    checked: bool  # its signature (or its being unsigned) and its contents were checked
    detail: str

    def text(self) -> str:
        state = "checked" if self.checked else "NOT checked" if self.present else "absent"
        return escape_control(f"{self.name} ({self.predicate_type}): {state}: {self.detail}")


@dataclass
class BundleCheck(Wire):
    """What ``verify`` made of a bundle; written with ``ok`` first (the replay attempts
    the statement lists and the key it verified with are not written)."""

    WIRE_EXTRA = ("ok",)
    WIRE_ORDER = ("ok", "path", "run_id", "verdict")

    path: Path
    files_checked: int = 0
    signed: bool = False
    key_id: str | None = None
    key_source: KeySource | None = None
    trusted: bool = False  # the signature verified against a key the user trusts
    embedded_fingerprint: str | None = None  # when checked with the key inside the bundle
    ledger_head: str | None = None  # the exporting store's ledger head, as signed
    run_id: str | None = None
    verdict: str | None = None
    replays: int = field(default=0, metadata=wire(omit="always"))
    """Replay attempts the statement lists (none may have a verdict)."""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    statements: list[StatementCheck] = field(default_factory=list)
    signing_key: keys.PublicKey | None = field(
        default=None, repr=False, compare=False, metadata=wire(omit="always")
    )
    """The key the main statement's signature verified with (None: not verified)."""

    @property
    def ok(self) -> bool:
        return not self.problems


COVERED_DOCUMENTS = (
    ("bom.cdx.json", "CycloneDX 1.6 ML-BOM"),
    ("annex_iv.json", "EU AI Act Annex IV map"),
)


def _dig(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _read(bundle: Path, name: str, limit: int, chk: BundleCheck) -> bytes | None:
    """The bytes of the bundle file ``bundle/name``, opened under the bundle folder
    through the door (never through a link), bounded; None when it is absent or a link
    (the walk reports a link as "added: not a regular file"), else b"" with a problem."""
    if not os.path.lexists(bundle / name) or os.path.islink(bundle / name):
        return None
    try:
        return read_under(bundle, name, "bundle file", limit=limit)
    except Refused as e:
        chk.problems.append(Problem(name, "malformed", e.message))
        return b""


def _member_limit(name: str) -> int:
    """The most bytes hashed of the bundle file ``name``: a run's log (``logs/``) as much
    as a run log may hold, any other file ``LIMITS["bundle file"]``."""
    return LIMITS["run log"] if name.startswith("logs/") else LIMITS["bundle file"]


def _hash_member(bundle: Path, name: str, chk: BundleCheck) -> str | None:
    """sha256 of the bundle file ``bundle/name``, streamed through the door; None with a
    problem when it is refused (a link swapped in, a special file, over its limit)."""
    try:
        with open_under(bundle, name, "bundle file", limit=_member_limit(name)) as f:
            h = hashlib.sha256()
            for chunk in f.chunks():
                h.update(chunk)
            return h.hexdigest()
    except Refused as e:
        chk.problems.append(Problem(name, "malformed", e.message))
        return None


def verify_bundle(
    path: Path,
    *,
    public_key: keys.PublicKey | None = None,
    trusted_keys: Sequence[keys.PublicKey] = (),
    allow_embedded_key: bool = False,
    allow_unsigned: bool = False,
) -> BundleCheck:
    """Re-hash every file and check the signature against the trusted keys.

    ``public_key`` (``--key``) and ``trusted_keys`` (the trusted-keys file) are the keys
    whose signature counts.  With none of them, a signed bundle fails with
    "signature not checked against a trusted key" unless ``allow_embedded_key``; an
    unsigned bundle fails unless ``allow_unsigned``.
    """
    if not path.is_dir():
        raise BadInput(f"{path} is not a bundle folder")
    trusted = ([public_key] if public_key is not None else []) + list(trusted_keys)
    chk = BundleCheck(path)
    bad = chk.problems.append
    files, odd = checksums.bundle_files(path)
    empty = [name for name in odd if name.endswith("/")]
    for name in odd:
        if not name.endswith("/"):
            bad(Problem(name, "added", "not a regular file; a bundle holds only files"))
    # -- the envelope: its form, then its signature, then the statement it carries
    stmt: dict[str, Any] | None = None
    raw_env = _read(path, ENVELOPE_NAME, MAX_ENVELOPE_READ, chk)
    if raw_env is None:
        bad(Problem(ENVELOPE_NAME, "missing", "the signed statement is gone"))
    else:
        try:
            env = read_envelope(raw_env)
        except EnvelopeError as e:
            bad(Problem(ENVELOPE_NAME, "malformed", str(e)))
        else:
            if _check_signature(path, env, trusted, chk, allow_embedded_key, allow_unsigned):
                try:
                    stmt = statement_of(env)
                except EnvelopeError as e:
                    bad(Problem(ENVELOPE_NAME, "malformed", str(e)))
    chk.statements.append(_main_statement(chk, raw_env is not None, stmt is not None))
    predicate: dict[str, Any] = stmt["predicate"] if stmt else {}
    run_id = predicate.get("run_id")
    chk.run_id = run_id if isinstance(run_id, str) else None
    verdict = _dig(predicate, "replay", "verdict")
    head = _dig(predicate, "store", "ledger_head")
    chk.ledger_head = escape_control(head) if isinstance(head, str) else None
    chk.verdict = verdict if isinstance(verdict, str) else None
    replays = _dig(predicate, "replay", "replays")
    chk.replays = len(replays) if isinstance(replays, list) else 0
    chk.statements.append(_check_slsa(path, chk, stmt))
    chk.statements.append(_check_model_sig(path, chk, stmt))
    for name, what in COVERED_DOCUMENTS:
        if name in files:
            chk.notes.append(
                f"{name} ({what}) is no signed statement of its own: {checksums.SUMS_NAME},"
                " which the signed statement names, covers it"
            )
    # -- the checksum list, against the statement
    raw_sums = _read(path, checksums.SUMS_NAME, MAX_SUMS_BYTES, chk)
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
        actual = _hash_member(path, name, chk)
        if actual is not None and actual != digest:
            bad(Problem(name, "changed", f"sha256 is {actual[:16]}, listed as {digest[:16]}"))
    for name in sorted(present - set(listed) - {checksums.SUMS_NAME, ENVELOPE_NAME}):
        bad(Problem(name, "added", "not listed in SHA256SUMS"))
    for name in empty:  # unless it held a listed file that is now missing
        if not any(n.startswith(name) for n in listed):
            bad(Problem(name, "added", "an empty folder; a bundle holds only files"))
    return chk


def verify_with_key(
    path: Path, key: Path | None, *, allow_embedded_key: bool, allow_unsigned: bool
) -> BundleCheck:
    """:func:`verify_bundle` against the public key in the file ``key`` (``--key``), else
    the keys of the trusted-keys file: what ``replay-tui verify`` and the TUI check."""
    public_key = keys.load_public_key(key) if key is not None else None
    trusted = keys.load_trusted_keys() if key is None else []
    return verify_bundle(
        path,
        public_key=public_key,
        trusted_keys=trusted,
        allow_embedded_key=allow_embedded_key,
        allow_unsigned=allow_unsigned,
    )


def _ids(ids: Sequence[str]) -> str:
    return ", ".join(escape_control(i[:16]) for i in ids)


def _check_signature(
    path: Path,
    env: Envelope,
    trusted: Sequence[keys.PublicKey],
    chk: BundleCheck,
    allow_embedded_key: bool,
    allow_unsigned: bool,
) -> bool:
    """Check the envelope's signatures; False when its statement cannot be trusted."""
    ids = signer_ids(env)
    chk.signed = bool(ids)
    bad = chk.problems.append
    if not ids:
        if trusted:
            bad(Problem(ENVELOPE_NAME, "signature", "the bundle is not signed"))
        elif allow_unsigned:
            chk.notes.append("the bundle is not signed: its checksums catch accidents, not forgery")
        else:
            bad(
                Problem(
                    ENVELOPE_NAME,
                    "signature",
                    f"the bundle is not signed: {NOT_TRUSTED}; its checksums alone catch"
                    " accidents, not forgery (--allow-unsigned to accept that)",
                )
            )
        return True
    if trusted:
        by_id = {keys.key_id(k): k for k in trusted}
        good = [kid for kid in ids if kid in by_id]
        if not good:
            bad(
                Problem(
                    ENVELOPE_NAME,
                    "signature",
                    f"signed by key {_ids(ids)}, not by the given key"
                    f" {_ids(sorted(by_id))}: {NOT_TRUSTED}",
                )
            )
            return False
        for kid in good:
            try:
                verify_signature(env, by_id[kid])
            except SignatureError as e:
                bad(Problem(ENVELOPE_NAME, "signature", str(e)))
                return False
        chk.key_id, chk.key_source, chk.trusted = good[0], "given", True
        chk.signing_key = by_id[good[0]]
        _extra_signatures(ids, set(good), chk)
        return True
    if not allow_embedded_key:
        bad(
            Problem(
                ENVELOPE_NAME,
                "signature",
                f"{NOT_TRUSTED}: pass --key with the signer's public key, or list it in the"
                f" trusted-keys file ({keys.trusted_keys_path()}); the key inside the bundle"
                " proves nothing about who made it (--allow-embedded-key to check with it"
                " anyway)",
            )
        )
        return False
    public_key = _bundled_key(path, chk)
    if public_key is None:
        return False
    chk.key_source = "bundle"
    chk.key_id = keys.key_id(public_key)
    if chk.key_id not in ids:
        bad(Problem(keys.BUNDLE_KEY_NAME, "changed", "it is not the key that signed the bundle"))
        return False
    try:
        verify_signature(env, public_key)
    except SignatureError as e:
        bad(Problem(ENVELOPE_NAME, "signature", str(e)))
        return False
    chk.embedded_fingerprint = keys.fingerprint(public_key)
    chk.signing_key = public_key
    chk.notes.append(
        f"{NOT_TRUSTED}: checked with the key inside the bundle, fingerprint"
        f" {chk.embedded_fingerprint}; this shows the bundle is intact, not who made it"
    )
    _extra_signatures(ids, {chk.key_id}, chk)
    return True


def _extra_signatures(ids: Sequence[str], checked: set[str], chk: BundleCheck) -> None:
    extra = [kid for kid in ids if kid not in checked]
    if extra:
        chk.problems.append(
            Problem(
                ENVELOPE_NAME,
                "added",
                f"{len(extra)} more signature(s) beside the checked one, by key {_ids(extra)}:"
                " an export writes one; someone added them",
            )
        )


def _bundled_key(path: Path, chk: BundleCheck) -> keys.PublicKey | None:
    raw = _read(path, keys.BUNDLE_KEY_NAME, keys.MAX_KEY_FILE_BYTES, chk)
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


def _how_signed(chk: BundleCheck) -> str:
    if not chk.signed:
        return "unsigned (accepted with --allow-unsigned)"
    key = f"key {escape_control((chk.key_id or '')[:16])}"
    if chk.key_source == "bundle":
        return f"signature checked with the key inside the bundle ({key}), not a trusted one"
    return f"signature checked against the trusted {key}"


def _main_statement(chk: BundleCheck, present: bool, read: bool) -> StatementCheck:
    if not present:
        return StatementCheck(ENVELOPE_NAME, PREDICATE_TYPE, False, False, "missing")
    if not read:
        return StatementCheck(
            ENVELOPE_NAME, PREDICATE_TYPE, True, False, "its signature or form did not check"
        )
    return StatementCheck(
        ENVELOPE_NAME,
        PREDICATE_TYPE,
        True,
        True,
        f"{_how_signed(chk)}; it names the digest of {checksums.SUMS_NAME}",
    )


def _check_slsa(path: Path, chk: BundleCheck, main: dict[str, Any] | None) -> StatementCheck:
    """The SLSA provenance envelope: signed by the key that signed the bundle (or, like
    the bundle, unsigned), a SLSA v1 Statement about the same subjects and the same run."""

    def not_checked(detail: str, problem: Problem | None = None) -> StatementCheck:
        if problem is not None:
            chk.problems.append(problem)
        return StatementCheck(SLSA_NAME, SLSA_PREDICATE_TYPE, True, False, detail)

    raw = _read(path, SLSA_NAME, MAX_ENVELOPE_READ, chk)
    if raw is None:
        return StatementCheck(
            SLSA_NAME,
            SLSA_PREDICATE_TYPE,
            False,
            False,
            "absent (exported by a version before SLSA provenance)",
        )
    if raw == b"":
        return not_checked("it could not be read")
    try:
        env = read_envelope(raw)
    except EnvelopeError as e:
        return not_checked("malformed", Problem(SLSA_NAME, "malformed", str(e)))
    ids = signer_ids(env)
    if chk.signed:
        key = chk.signing_key
        if key is None:
            return not_checked("the bundle's own signature did not check, so neither did this")
        kid = keys.key_id(key)
        if ids != [kid]:
            return not_checked(
                "signed by another key",
                Problem(
                    SLSA_NAME,
                    "signature",
                    f"signed by key {_ids(ids) or '(none)'}, not (only) by the key that"
                    f" signed the bundle, {_ids([kid])}",
                ),
            )
        try:
            verify_signature(env, key)
        except SignatureError as e:
            return not_checked("signature fails", Problem(SLSA_NAME, "signature", str(e)))
    elif ids:
        return not_checked(
            "signed while the bundle is not",
            Problem(SLSA_NAME, "signature", "signed, while the bundle's statement is not"),
        )
    try:
        stmt = statement_of(env, SLSA_PREDICATE_TYPE)
    except EnvelopeError as e:
        return not_checked("malformed", Problem(SLSA_NAME, "malformed", str(e)))
    if main is not None:
        if stmt["subject"] != main["subject"]:
            return not_checked(
                "its subjects differ",
                Problem(
                    SLSA_NAME, "changed", "its subjects are not those of the bundle's statement"
                ),
            )
        run = _dig(stmt["predicate"], "runDetails", "metadata", "invocationId")
        if run != _dig(main, "predicate", "run_id"):
            return not_checked(
                "another run's",
                Problem(SLSA_NAME, "changed", "its invocationId is not the bundle's run"),
            )
    return StatementCheck(
        SLSA_NAME,
        SLSA_PREDICATE_TYPE,
        True,
        True,
        f"{_how_signed(chk)}; same subjects and run as the bundle's statement",
    )


def _check_model_sig(path: Path, chk: BundleCheck, main: dict[str, Any] | None) -> StatementCheck:
    """``model.sig``: signed by the bundle's (ECDSA) key, naming exactly the model files
    of the manifest the bundle's statement signs."""
    name, ptype = modelsig.MODEL_SIG_NAME, modelsig.MODEL_PREDICATE_TYPE
    raw = _read(path, name, modelsig.MAX_MODEL_SIG_BYTES, chk)
    if raw is None:
        why = (
            "absent: the bundle is not signed"
            if not chk.signed
            else "absent: model_signing takes ECDSA keys only, and this bundle's key is Ed25519"
            if isinstance(chk.signing_key, Ed25519PublicKey)
            else "absent: the run has no hashed model files, or the bundle predates it"
        )
        return StatementCheck(name, ptype, False, False, why)

    def not_checked(detail: str, problem: Problem | None = None) -> StatementCheck:
        if problem is not None:
            chk.problems.append(problem)
        return StatementCheck(name, ptype, True, False, detail)

    if raw == b"":
        return not_checked("it could not be read")
    key = chk.signing_key
    if not chk.signed:
        return not_checked(
            "present while the bundle is not signed",
            Problem(name, "added", "a model signature in a bundle that is not signed"),
        )
    if key is None:
        return not_checked("the bundle's own signature did not check, so neither did this")
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return not_checked(
            "beside an Ed25519 signature",
            Problem(name, "signature", "an Ed25519-signed bundle has no model signature"),
        )
    if main is None:
        return not_checked("the bundle's statement could not be read")
    artifacts = _dig(main, "predicate", "manifest", "outputs", "artifacts")
    try:
        n = modelsig.check_model_signature(raw, key, artifacts)
    except modelsig.ModelSignatureError as e:
        kind = cast(ProblemKind, e.kind if e.kind in get_args(ProblemKind) else "malformed")
        return not_checked("it does not check", Problem(name, kind, str(e)))
    return StatementCheck(
        name,
        ptype,
        True,
        True,
        f"{_how_signed(chk)}; names the {n} model file(s) of the signed manifest"
        " (model_signing verify key checks the files)",
    )
