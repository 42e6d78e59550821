"""Ed25519 signing keys: PEM files (PKCS#8 private, SubjectPublicKeyInfo public).

A key's id is the sha256 of its 32 raw public-key bytes, in hex: the same key always has
the same id, whatever the PEM wrapping.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from replay_tui.door import LIMITS, read_named
from replay_tui.errors import BadInput

MAX_KEY_FILE_BYTES = LIMITS["key file"]  # 64 KiB
BUNDLE_KEY_NAME = "signer.pub"  # the signer's public key, inside a signed bundle


@dataclass(frozen=True)
class KeyPair:
    private_path: Path
    public_path: Path
    key_id: str


def key_id(public_key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_pem(public_key: Ed25519PublicKey) -> bytes:
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
    private_path: Path, public_path: Path | None = None, *, force: bool = False
) -> KeyPair:
    """Write a new Ed25519 key pair: the private key 0600, the public key 0644."""
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
    if not private_path.parent.is_dir():
        raise BadInput(f"folder {private_path.parent} does not exist")
    key = Ed25519PrivateKey.generate()
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


def load_private_key(path: Path) -> Ed25519PrivateKey:
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise BadInput(f"{path} is encrypted with a passphrase; keygen keys are not") from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"{path} is not a PEM private key", "make one with `replay-tui keygen`"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"{path} is not an Ed25519 key", "make one with `replay-tui keygen`")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    return parse_public_key(_read_key_file(path), str(path))


def parse_public_key(data: bytes, source: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"{source} is not a PEM public key",
            "pass the .pub file that `replay-tui keygen` wrote",
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput(f"{source} is not an Ed25519 public key")
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


def load_trusted_keys(path: Path | None = None) -> list[Ed25519PublicKey]:
    """The keys of the trusted-keys file; none when it does not exist."""
    path = path or trusted_keys_path()
    if not path.exists() and not path.is_symlink():
        return []
    raw = read_named(path, "trusted-keys file")
    blocks = _PEM_BLOCK.findall(raw)
    if not blocks and raw.strip():
        raise BadInput(f"trusted-keys file {path} holds no PEM public key")
    return [parse_public_key(b, f"{path} (key {i + 1})") for i, b in enumerate(blocks)]


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """The key id grouped for reading aloud: ``ab12 cd34 ...`` (first 32 hex digits)."""
    kid = key_id(public_key)[:32]
    return " ".join(kid[i : i + 4] for i in range(0, 32, 4))
