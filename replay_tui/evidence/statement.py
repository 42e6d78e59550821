"""The bundle's attestation: an in-toto Statement v1 inside a DSSE envelope.

The Statement's subjects are the run's artifacts by sha256; its predicate carries the
manifest, the replay verdict, the gaps and the digest of ``SHA256SUMS``.  The envelope
(DSSE v1, via ``securesystemslib``) is signed with ECDSA P-256 or Ed25519; ``keyid`` is
the key's id (``keys.key_id``).  The bundle's SLSA provenance (``slsa.py``) is another
Statement of the same form, in an envelope of its own.  The envelope file holds one
envelope as one line of RFC 8785 JSON (the ``.intoto.jsonl`` convention), and nothing
else: any other byte there is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from securesystemslib import exceptions as ssl_exceptions
from securesystemslib.dsse import Envelope

# The package's public API re-exports these without ``__all__``, which strict mypy flags.
from securesystemslib.signer import CryptoSigner, SSlibKey

from replay_tui.evidence.keys import PrivateKey, PublicKey, key_id, scheme
from storage.manifest import canonical_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://replay-tui.dev/provenance/replay/v1"
ENVELOPE_NAME = "provenance.intoto.jsonl"
MAX_ENVELOPE_BYTES = 64 * 1024 * 1024


class EnvelopeError(ValueError):
    """The envelope or its statement is malformed."""


class SignatureError(ValueError):
    """The signature is missing, made with another key, or does not verify."""


def make_statement(
    subjects: Sequence[Mapping[str, Any]],
    predicate: Mapping[str, Any],
    predicate_type: str = PREDICATE_TYPE,
) -> dict[str, Any]:
    """An in-toto Statement v1 (subjects: ``{name, digest: {sha256}}``)."""
    if not subjects:
        raise ValueError("an in-toto Statement needs at least one subject")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [dict(s) for s in subjects],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }


def _sslib_key(public_key: PublicKey) -> SSlibKey:
    return SSlibKey.from_crypto(public_key, keyid=key_id(public_key), scheme=scheme(public_key))


def envelope(statement: Mapping[str, Any], private_key: PrivateKey | None) -> Envelope:
    """Wrap the statement in a DSSE envelope, signed when a key is given."""
    env = Envelope(canonical_json(dict(statement)), PAYLOAD_TYPE, {})
    if private_key is not None:
        env.sign(CryptoSigner(private_key, _sslib_key(private_key.public_key())))
    return env


def envelope_bytes(env: Envelope) -> bytes:
    return canonical_json(env.to_dict()) + b"\n"


def read_envelope(raw: bytes) -> Envelope:
    """Parse the envelope file strictly: exactly what ``envelope_bytes`` writes."""
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise EnvelopeError(f"{len(raw)} bytes: larger than any envelope this tool writes")
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("signatures"), list):
            raise EnvelopeError("not a DSSE envelope (payload, payloadType, signatures)")
        env = Envelope.from_dict(data)
        again = envelope_bytes(env)
    except EnvelopeError:
        raise
    except RecursionError:
        raise EnvelopeError("not a DSSE envelope: nested too deep") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise EnvelopeError(f"not a DSSE envelope: {type(e).__name__}: {e}") from None
    if again != raw:
        raise EnvelopeError("bytes differ from the envelope's canonical form (it was edited)")
    return env


def statement_of(env: Envelope, predicate_type: str = PREDICATE_TYPE) -> dict[str, Any]:
    """The in-toto Statement an envelope carries, checked for type and shape."""
    if env.payload_type != PAYLOAD_TYPE:
        raise EnvelopeError(f"payloadType is {env.payload_type!r}, not {PAYLOAD_TYPE!r}")
    try:
        stmt = json.loads(env.payload.decode("utf-8"))
    except RecursionError:
        raise EnvelopeError("the payload is not JSON: nested too deep") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise EnvelopeError(f"the payload is not JSON: {e}") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise EnvelopeError(f"the payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if stmt.get("predicateType") != predicate_type:
        raise EnvelopeError(f"predicateType is {stmt.get('predicateType')!r}")
    if not isinstance(stmt.get("subject"), list) or not isinstance(stmt.get("predicate"), dict):
        raise EnvelopeError("the Statement has no subject list or no predicate")
    return stmt


def signer_ids(env: Envelope) -> list[str]:
    return sorted(env.signatures)


def verify_signature(env: Envelope, public_key: PublicKey) -> str:
    """Check that ``public_key`` signed the envelope; returns its key id."""
    kid = key_id(public_key)
    ids = signer_ids(env)
    if not ids:
        raise SignatureError("the bundle is not signed")
    if kid not in ids:
        raise SignatureError(
            f"signed by key {', '.join(i[:16] for i in ids)}, not by the given key {kid[:16]}"
        )
    try:
        env.verify([_sslib_key(public_key)], 1)
    except ssl_exceptions.VerificationError:
        raise SignatureError(
            f"the signature of key {kid[:16]} does not verify: the statement was altered"
        ) from None
    return kid
