"""Item 7 and 10 of the trust issue: ``verify`` counts only a key the user trusts.

Each attack forges or tampers with a real exported bundle and runs the real CLI on it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope

from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.keys import generate, load_private_key
from replay_tui.evidence.statement import ENVELOPE_NAME, envelope_bytes, read_envelope
from storage.store import RunStore
from tests.conftest import RunCli
from tests.support.bundles import copy_bundle

NOT_TRUSTED = "signature not checked against a trusted key"


def _forged(stored: tuple[Path, str], tmp_path: Path) -> tuple[Path, Path]:
    """A bundle exported and signed by mallory's key (her public key inside it)."""
    store_path, run_id = stored
    mallory = generate(tmp_path / "m.key", tmp_path / "m.pub")
    forged = tmp_path / "forged"
    with RunStore(store_path) as store:
        export_bundle(store, run_id, forged, key_path=mallory.private_path)
    return forged, mallory.public_path


def test_a_bundle_resigned_with_the_forgers_key_is_not_intact(
    cli: RunCli,
    replayed_store: tuple[Path, str],
    keypair: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    forged, _ = _forged(replayed_store, tmp_path)
    r = cli("verify", forged)
    assert r.returncode == 1, r.stdout
    assert NOT_TRUSTED in r.stdout and "intact" not in r.stdout.split("\n")[0]
    # against the key the user trusts: refused, naming both keys
    r = cli("verify", forged, "--key", keypair[1])
    assert r.returncode == 1 and "not by the given key" in r.stdout
    # the escape hatch says what it is and prints the fingerprint
    r = cli("verify", forged, "--allow-embedded-key")
    assert r.returncode == 0
    assert NOT_TRUSTED in r.stdout and "fingerprint" in r.stdout


def test_the_trusted_keys_file_is_used_without_key(
    cli: RunCli,
    bundle: Path,
    replayed_store: tuple[Path, str],
    keypair: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    trusted = tmp_path / "trusted-keys.pem"
    other = generate(tmp_path / "o.key", tmp_path / "o.pub")
    trusted.write_bytes(b"# team keys\n" + other.public_path.read_bytes() + keypair[1].read_bytes())
    os.environ["REPLAY_TUI_TRUSTED_KEYS"] = str(trusted)
    try:
        r = cli("verify", bundle)
        assert r.returncode == 0, r.stdout
        assert "bundle intact" in r.stdout
        forged, _ = _forged(replayed_store, tmp_path)
        r = cli("verify", forged)
        assert r.returncode == 1 and "not by the given key" in r.stdout
    finally:
        del os.environ["REPLAY_TUI_TRUSTED_KEYS"]


@pytest.fixture
def copied(bundle: Path, tmp_path: Path) -> Path:
    """A copy of the exported, signed bundle, for a test to tamper with."""
    return copy_bundle(bundle, tmp_path)


def _not_intact(cli: RunCli, b: Path, keypair: tuple[Path, Path]) -> str:
    """What ``verify B --key PUB`` (the trusted key) printed, having found ``b`` not
    intact."""
    r = cli("verify", b, "--key", keypair[1])
    assert r.returncode == 1, r.stdout
    return str(r.stdout)


def _rewrite_envelope(b: Path, edit: object) -> None:
    env = read_envelope((b / ENVELOPE_NAME).read_bytes())
    edit(env)  # type: ignore[operator]
    (b / ENVELOPE_NAME).write_bytes(envelope_bytes(env))


def test_stripped_signatures_fail(cli: RunCli, copied: Path, keypair: tuple[Path, Path]) -> None:
    _rewrite_envelope(copied, lambda env: env.signatures.clear())
    (copied / "signer.pub").unlink()  # an attacker would also drop the key
    r = cli("verify", copied)
    assert r.returncode == 1 and "the bundle is not signed" in r.stdout
    assert "the bundle is not signed" in _not_intact(cli, copied, keypair)


def test_an_extra_signature_beside_the_valid_one_is_reported(
    cli: RunCli, copied: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    from securesystemslib.signer import CryptoSigner, SSlibKey

    b = copied
    mallory = generate(tmp_path / "x.key", tmp_path / "x.pub", kind="ed25519")
    priv = load_private_key(mallory.private_path)

    def add(env: Envelope) -> None:
        key = SSlibKey.from_crypto(priv.public_key(), keyid=mallory.key_id, scheme="ed25519")
        env.sign(CryptoSigner(priv, key))

    _rewrite_envelope(b, add)
    assert len(json.loads((b / ENVELOPE_NAME).read_bytes())["signatures"]) == 2
    out = _not_intact(cli, b, keypair)
    assert f"more signature(s) beside the checked one, by key {mallory.key_id[:16]}" in out


def test_an_added_empty_folder_is_reported(
    cli: RunCli, copied: Path, keypair: tuple[Path, Path]
) -> None:
    (copied / "notes").mkdir()
    assert "added: notes/: an empty folder" in _not_intact(cli, copied, keypair)


def test_key_from_dev_zero_or_a_huge_file_is_refused_quickly(
    cli: RunCli,
    bundle: Path,
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    r = cli("verify", bundle, "--key", "/dev/zero")
    assert r.returncode == 2
    assert "key file /dev/zero is not a regular file" in r.stderr
    big = tmp_path / "big.pub"
    with big.open("wb") as f:
        f.truncate(5 * 1024**3)  # sparse: 5 GiB that costs nothing on disk
    r = cli("verify", bundle, "--key", big)
    assert r.returncode == 2 and "the limit for a key file is 64 KiB" in r.stderr
    fifo = tmp_path / "k.fifo"
    os.mkfifo(fifo)
    r = cli("verify", bundle, "--key", fifo)
    assert r.returncode == 2 and "not a regular file" in r.stderr
    assert time.monotonic() - t0 < 60  # each refusal is immediate; 60 s only guards a hang


def test_special_files_inside_a_bundle_are_not_read(
    cli: RunCli, copied: Path, keypair: tuple[Path, Path]
) -> None:
    (copied / "SHA256SUMS").unlink()
    os.mkfifo(copied / "SHA256SUMS")
    (copied / ENVELOPE_NAME).unlink()
    os.symlink("/dev/zero", copied / ENVELOPE_NAME)
    out = _not_intact(cli, copied, keypair)
    assert f"added: {ENVELOPE_NAME}: not a regular file" in out
    assert "SHA256SUMS" in out


def test_control_characters_in_problems_are_escaped(
    cli: RunCli, copied: Path, keypair: tuple[Path, Path]
) -> None:
    (copied / "evil\x1b]0;owned\x07.txt").write_bytes(b"x")
    out = _not_intact(cli, copied, keypair)
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;owned\\x07.txt" in out
