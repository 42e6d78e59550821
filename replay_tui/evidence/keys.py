"""Signing keys: ECDSA P-256 (the default) or Ed25519, as PEM files (PKCS#8 private,
SubjectPublicKeyInfo public).

ECDSA P-256 is the default because the independent verifiers take it: OpenSSF's
``model_signing`` verifies key-based signatures made with ECDSA keys only, and cosign
verifies either kind.  Ed25519 keys made by earlier versions sign and verify as before.

A key's id, in hex: for Ed25519 the sha256 of its 32 raw public-key bytes (as it always
was), for ECDSA the sha256 of its DER SubjectPublicKeyInfo.  The same key always has the
same id, whatever the PEM wrapping.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from replay_tui.door import LIMITS, read_named
from replay_tui.errors import BadInput

MAX_KEY_FILE_BYTES = LIMITS["key file"]  # 64 KiB
BUNDLE_KEY_NAME = "signer.pub"  # the signer's public key, inside a signed bundle

KeyType = Literal["ecdsa-p256", "ed25519"]
KEY_TYPES: tuple[KeyType, ...] = get_args(KeyType)
DEFAULT_KEY_TYPE: KeyType = "ecdsa-p256"
PublicKey = Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = Ed25519PrivateKey | ec.EllipticCurvePrivateKey
KEYGEN_ADVICE = "make one with `replay-tui keygen`"


@dataclass(frozen=True)
class KeyPair:
    private_path: Path
    public_path: Path
    key_id: str


def key_id(public_key: PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte Ed25519 public key, or of an ECDSA key's DER
    SubjectPublicKeyInfo."""
    if isinstance(public_key, Ed25519PublicKey):
        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:
        raw = public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    return hashlib.sha256(raw).hexdigest()


def key_type(public_key: PublicKey) -> KeyType:
    return "ed25519" if isinstance(public_key, Ed25519PublicKey) else "ecdsa-p256"


def scheme(public_key: PublicKey) -> str:
    """The key's signature scheme as DSSE signers and ``securesystemslib`` name it."""
    return "ed25519" if isinstance(public_key, Ed25519PublicKey) else "ecdsa-sha2-nistp256"


def _known(key: object, source: str, what: str) -> None:
    """Refuse a key of any other kind than Ed25519 or ECDSA on P-256."""
    if isinstance(key, Ed25519PrivateKey | Ed25519PublicKey):
        return
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return
        raise BadInput(
            f"{source} is an ECDSA key on {key.curve.name}, not P-256",
            KEYGEN_ADVICE,
        )
    raise BadInput(f"{source} is not an ECDSA P-256 or Ed25519 {what}", KEYGEN_ADVICE)


def public_pem(public_key: PublicKey) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the first byte on (never briefly world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have narrowed it; never widened past ``mode``
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    finally:
        os.close(fd)


def generate(
    private_path: Path,
    public_path: Path | None = None,
    *,
    force: bool = False,
    kind: KeyType = DEFAULT_KEY_TYPE,
) -> KeyPair:
    """Write a new key pair of ``kind``: the private key 0600, the public key 0644."""
    if kind not in KEY_TYPES:
        raise BadInput(f"key type {kind!r}: not one of {', '.join(KEY_TYPES)}")
    public_path = public_path or private_path.with_name(private_path.name + ".pub")
    if private_path == public_path:
        raise BadInput("the private and public key files must differ")
    for p in (private_path, public_path):
        if p.exists() or p.is_symlink():
            if not force:
                raise BadInput(f"{p} already exists", "choose another --out, or pass --force")
            if p.is_dir():
                raise BadInput(f"{p} is a folder")
            p.unlink()
    for folder in {private_path.parent, public_path.parent}:  # a new folder: made, 0700
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"cannot make folder {folder}: {e.strerror or e}") from None
    key: PrivateKey = (
        Ed25519PrivateKey.generate()
        if kind == "ed25519"
        else ec.generate_private_key(ec.SECP256R1())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_new(private_path, pem, 0o600)
    _write_new(public_path, public_pem(key.public_key()), 0o644)
    return KeyPair(private_path, public_path, key_id(key.public_key()))


def _read_key_file(path: Path) -> bytes:
    """A key file's bytes: a regular file of at most 64 KiB (never /dev/zero or a FIFO),
    read through the door (a path the user named: a link in it is followed)."""
    return read_named(path, "key file")


def load_private_key(path: Path) -> PrivateKey:
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise BadInput(f"{path} is encrypted with a passphrase; keygen keys are not") from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"{path} is not a PEM private key", "make one with `replay-tui keygen`"
        ) from None
    _known(key, str(path), "private key")
    assert isinstance(key, Ed25519PrivateKey | ec.EllipticCurvePrivateKey)
    return key


def load_public_key(path: Path) -> PublicKey:
    return parse_public_key(_read_key_file(path), str(path))


def parse_public_key(data: bytes, source: str) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"{source} is not a PEM public key",
            "pass the .pub file that `replay-tui keygen` wrote",
        ) from None
    _known(key, source, "public key")
    assert isinstance(key, Ed25519PublicKey | ec.EllipticCurvePublicKey)
    return key


# -- trusted keys -----------------------------------------------------------------------

TRUSTED_KEYS_ENV = "REPLAY_TUI_TRUSTED_KEYS"
MAX_TRUSTED_KEYS_BYTES = LIMITS["trusted-keys file"]  # 1 MiB
_PEM_BLOCK = re.compile(
    rb"-----BEGIN PUBLIC KEY-----\r?\n[A-Za-z0-9+/=\r\n]*?-----END PUBLIC KEY-----"
)


def trusted_keys_path() -> Path:
    """Where the trusted-keys file is: ``$REPLAY_TUI_TRUSTED_KEYS``, else the user config.

    The file holds the PEM public keys (as ``keygen`` writes them) whose signatures
    ``verify`` accepts, one after the other; lines outside the PEM blocks are comments.
    """
    env = os.environ.get(TRUSTED_KEYS_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir("replay-tui")) / "trusted-keys.pem"


def load_trusted_keys(path: Path | None = None) -> list[PublicKey]:
    """The keys of the trusted-keys file; none when it does not exist."""
    path = path or trusted_keys_path()
    if not path.exists() and not path.is_symlink():
        return []
    raw = read_named(path, "trusted-keys file")
    blocks = _PEM_BLOCK.findall(raw)
    if not blocks and raw.strip():
        raise BadInput(f"trusted-keys file {path} holds no PEM public key")
    return [parse_public_key(b, f"{path} (key {i + 1})") for i, b in enumerate(blocks)]


def fingerprint(public_key: PublicKey) -> str:
    """The key id grouped for reading aloud: ``ab12 cd34 ...`` (first 32 hex digits)."""
    kid = key_id(public_key)[:32]
    return " ".join(kid[i : i + 4] for i in range(0, 32, 4))
