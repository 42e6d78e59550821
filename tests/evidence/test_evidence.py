"""Evidence bundles: export, keygen, verify; tampering of every kind is caught and named."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_public_key,
)

from replay_tui.evidence import checksums
from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.keys import generate, key_id, load_public_key
from replay_tui.evidence.statement import ENVELOPE_NAME, PAYLOAD_TYPE, PREDICATE_TYPE
from replay_tui.evidence.verify import BundleCheck, verify_bundle
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest, RunCli
from tests.helpers.chromium import chromium
from tests.helpers.replays import add_attempt
from tests.support.bundles import copy_bundle


def _files(bundle: Path) -> list[str]:
    return sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())


def _check(path: Path, pub: Path | None) -> BundleCheck:
    """Verify against ``pub``; with None, integrity only (the key inside, or unsigned)."""
    return verify_bundle(
        path,
        public_key=load_public_key(pub) if pub else None,
        allow_embedded_key=pub is None,
        allow_unsigned=pub is None,
    )


# -- keys -------------------------------------------------------------------------------


def test_keygen_writes_private_key_0600_and_refuses_to_overwrite(
    cli: RunCli, tmp_path: Path
) -> None:
    key = tmp_path / "team.key"
    r = cli("keygen", "--out", key, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["private_key"] == str(key) and out["public_key"] == str(tmp_path / "team.pub")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "team.pub").stat().st_mode) == 0o644
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    pub = load_pem_public_key((tmp_path / "team.pub").read_bytes())
    # the default is ECDSA P-256: what model_signing and cosign both verify
    assert isinstance(pub, ec.EllipticCurvePublicKey) and isinstance(pub.curve, ec.SECP256R1)
    assert out["type"] == "ecdsa-p256"
    spki = pub.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    assert out["key_id"] == key_id(pub) == hashlib.sha256(spki).hexdigest()
    again = cli("keygen", "--out", key)
    assert again.returncode == 2 and "already exists" in again.stderr
    r = cli("keygen", "--out", key, "--force", "--type", "ed25519", "--json")
    assert r.returncode == 0, r.stderr
    pub = load_pem_public_key((tmp_path / "team.pub").read_bytes())
    assert isinstance(pub, Ed25519PublicKey)  # the id of an Ed25519 key is as it always was
    assert json.loads(r.stdout)["key_id"] == hashlib.sha256(pub.public_bytes_raw()).hexdigest()


# -- export and a clean verify -----------------------------------------------------------


def test_exported_bundle_verifies_and_is_recorded(
    cli: RunCli, replayed_store: tuple[Path, str], keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    store_path, run_id = replayed_store
    out = tmp_path / "evidence"
    r = cli("export", run_id[:10], "--out", out, "--sign", keypair[0], "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["signed"] and res["verdict"] == "IDENTICAL"
    files = _files(out)
    replay_id = json.loads((out / "comparison.json").read_text())["replay_run"]
    assert files == sorted(
        [
            "SHA256SUMS",
            ENVELOPE_NAME,
            "annex_iv.json",
            "bom.cdx.json",
            "comparison.json",
            "gaps.json",
            f"logs/{replay_id}.log",
            "manifest.json",
            "model.sig",
            "provenance.slsa.intoto.jsonl",
            f"replays/{replay_id}.json",
            "report.html",
            "report.md",
            "signer.pub",
        ]
    )
    v = cli("verify", out, "--key", keypair[1])
    assert v.returncode == 0, v.stdout + v.stderr
    assert "bundle intact" in v.stdout and "IDENTICAL" in v.stdout
    # verify says which statements the bundle carries and which it checked
    assert f"statement: {ENVELOPE_NAME} ({PREDICATE_TYPE}): checked" in v.stdout
    assert (
        "statement: provenance.slsa.intoto.jsonl (https://slsa.dev/provenance/v1): checked"
        in v.stdout
    )
    # the list is what coreutils reads, and covers every file but itself and the envelope
    sc = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=out, text=True, capture_output=True
    )
    assert sc.returncode == 0, sc.stdout + sc.stderr
    listed = checksums.parse((out / "SHA256SUMS").read_bytes())
    assert sorted(listed) == [f for f in files if f not in ("SHA256SUMS", ENVELOPE_NAME)]
    # recorded in the store: `show` says the run has a signed bundle
    shown = json.loads(cli("show", run_id, "--json").stdout)
    assert shown["run"]["signed"] is True
    assert "signed evidence bundle: yes" in cli("show", run_id).stdout
    with RunStore(store_path) as store:
        (b,) = store.facts("bundles")
        assert b["run_id"] == run_id and b["signed"] == 1 and b["path"] == str(out)
        assert b["key_id"] == key_id(load_public_key(keypair[1]))
        assert store.verify().ok


def test_statement_is_in_toto_v1_in_a_dsse_envelope_signed_over_pae(
    bundle: Path, keypair: tuple[Path, Path]
) -> None:
    env = json.loads((bundle / ENVELOPE_NAME).read_bytes())
    assert env["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    payload = base64.b64decode(env["payload"])
    stmt = json.loads(payload)
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == PREDICATE_TYPE
    manifest = json.loads((bundle / "manifest.json").read_text())
    hashed = [a for a in manifest["outputs"]["artifacts"] if a["sha256"]]
    assert stmt["subject"] == [
        {"name": a["path"], "digest": {"sha256": a["sha256"]}} for a in hashed
    ]
    pred = stmt["predicate"]
    assert pred["manifest"] == manifest
    assert pred["replay"]["verdict"] == "IDENTICAL"
    assert pred["gaps"]["run"] == json.loads((bundle / "gaps.json").read_text())["run"]
    sums = hashlib.sha256((bundle / "SHA256SUMS").read_bytes()).hexdigest()
    assert pred["bundle"]["checksums"] == {"name": "SHA256SUMS", "sha256": sums}
    # the signature, checked by hand against the DSSE v1 pre-authentication encoding
    pub = load_public_key(keypair[1])
    (sig,) = env["signatures"]
    assert sig["keyid"] == key_id(pub)
    t = PAYLOAD_TYPE.encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)
    assert isinstance(pub, ec.EllipticCurvePublicKey)  # keygen's default: ECDSA P-256
    # raises if it does not verify (DER-encoded ECDSA over SHA-256, as DSSE signers make it)
    pub.verify(base64.b64decode(sig["sig"]), pae, ec.ECDSA(hashes.SHA256()))


# -- tampering: every file, every way ------------------------------------------------------


def test_flipping_one_byte_in_any_file_fails_naming_it(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    files = _files(bundle)
    assert len(files) == 14
    for name in files:
        size = (bundle / name).stat().st_size
        for offset in sorted({0, size // 2, size - 1}):
            b = copy_bundle(bundle, tmp_path)
            data = bytearray((b / name).read_bytes())
            data[offset] ^= 0x01
            (b / name).write_bytes(bytes(data))
            for pub in (keypair[1], None):
                chk = _check(b, pub)
                assert not chk.ok, (name, offset, pub)
                assert chk.problems[0].file == name, (name, offset, chk.problems)


def test_deleting_any_file_fails_naming_it(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    for name in _files(bundle):
        b = copy_bundle(bundle, tmp_path)
        (b / name).unlink()
        chk = _check(b, keypair[1])
        assert not chk.ok
        assert chk.problems[0].file == name and chk.problems[0].kind == "missing", chk.problems


@pytest.mark.parametrize("name", ["extra.txt", "logs/extra.log", "replays/.hidden", "empty"])
def test_adding_a_file_fails_naming_it(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path, name: str
) -> None:
    b = copy_bundle(bundle, tmp_path)
    (b / name).write_bytes(b"" if name == "empty" else b"x")
    chk = _check(b, keypair[1])
    assert not chk.ok
    assert [(p.file, p.kind) for p in chk.problems] == [(name, "added")]


def test_adding_a_symlink_fails(bundle: Path, keypair: tuple[Path, Path], tmp_path: Path) -> None:
    b = copy_bundle(bundle, tmp_path)
    os.symlink("/etc/hostname", b / "link")
    chk = _check(b, keypair[1])
    assert [(p.file, p.kind) for p in chk.problems] == [("link", "added")]


def test_cli_names_the_changed_file_and_exits_1(
    cli: RunCli, bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    b = copy_bundle(bundle, tmp_path)
    with (b / "report.md").open("ab") as f:
        f.write(b" ")
    r = cli("verify", b, "--key", keypair[1], "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["ok"] is False
    assert out["problems"][0] == {
        "file": "report.md",
        "kind": "changed",
        "message": out["problems"][0]["message"],
    }
    text = cli("verify", b, "--key", keypair[1])
    assert text.returncode == 1 and "changed: report.md" in text.stdout


def test_another_key_fails(cli: RunCli, bundle: Path, tmp_path: Path) -> None:
    other = generate(tmp_path / "other.key", tmp_path / "other.pub")
    r = cli("verify", bundle, "--key", other.public_path)
    assert r.returncode == 1
    assert "signature: provenance.intoto.jsonl" in r.stdout
    assert f"not by the given key {other.key_id[:16]}" in r.stdout


def test_resigned_with_another_key_fails_against_the_trusted_key(
    bundle: Path, keypair: tuple[Path, Path], replayed_store: tuple[Path, str], tmp_path: Path
) -> None:
    """A forger who rewrites everything and signs it with their own key is caught by --key."""
    store_path, run_id = replayed_store
    forged = tmp_path / "forged"
    mallory = generate(tmp_path / "m.key", tmp_path / "m.pub")
    with RunStore(store_path) as store:
        export_bundle(store, run_id, forged, key_path=mallory.private_path)
    assert _check(forged, None).ok  # self-consistent with the key inside it...
    chk = _check(forged, keypair[1])  # ...but not signed by the key we trust
    assert [(p.file, p.kind) for p in chk.problems] == [(ENVELOPE_NAME, "signature")]


def test_unsigned_bundle(
    cli: RunCli, replayed_store: tuple[Path, str], keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    store_path, run_id = replayed_store
    out = tmp_path / "unsigned"
    assert cli("export", run_id, "--out", out).returncode == 0
    assert "signer.pub" not in _files(out)
    untrusted = cli("verify", out)
    assert untrusted.returncode == 1
    assert "the bundle is not signed: signature not checked against a trusted key" in (
        untrusted.stdout
    )
    ok = cli("verify", out, "--allow-unsigned")
    assert ok.returncode == 0 and "not signed" in ok.stdout
    r = cli("verify", out, "--key", keypair[1])
    assert r.returncode == 1 and "the bundle is not signed" in r.stdout
    with RunStore(store_path) as store:
        assert store.get_run(run_id).signed is False


def test_export_refuses_a_used_folder_and_a_replay(
    cli: RunCli, replayed_store: tuple[Path, str], tmp_path: Path
) -> None:
    _, run_id = replayed_store
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    r = cli("export", run_id, "--out", used)
    assert r.returncode == 2 and "not empty" in r.stderr
    assert [p.name for p in used.iterdir()] == ["keep.txt"]
    with RunStore(replayed_store[0]) as store:
        replay_id = store.replays_of(run_id)[0].replay_run
    r = cli("export", replay_id, "--out", tmp_path / "x")
    assert r.returncode == 2 and "is a replay" in r.stderr
    assert not (tmp_path / "x").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    r = cli("export", run_id, "--out", "/proc/bundle")  # a folder nobody can write in
    assert r.returncode == 2, r.stderr
    assert "cannot write a bundle in /proc" in r.stderr and "Traceback" not in r.stderr


def test_verify_of_a_missing_folder_is_bad_input(cli: RunCli, tmp_path: Path) -> None:
    r = cli("verify", tmp_path / "nope")
    assert r.returncode == 2 and "not a bundle folder" in r.stderr


# -- the human report ------------------------------------------------------------------------


def test_html_report_opens_in_headless_chromium_and_shows_the_verdict(
    bundle: Path, tmp_path: Path
) -> None:
    page = (bundle / "report.html").read_text()
    # standalone: inline CSS, nothing fetched from anywhere
    assert "<style>" in page and "default-src 'none'" in page
    for needle in ("http://", "https://", "<link", "<script", "src="):
        assert needle not in page, needle
    url = (bundle / "report.html").as_uri()
    dom = chromium("--dump-dom", url, window="1200,900")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="verdict"' in dom.stdout and "Verdict: IDENTICAL" in dom.stdout
    assert 'class="side-by-side"' in dom.stdout
    shot = tmp_path / "report.png"
    r = chromium(f"--screenshot={shot}", url, window="1200,900")
    assert r.returncode == 0, r.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    md = (bundle / "report.md").read_text()
    assert "**Verdict: IDENTICAL**" in md and "side by side" in md


def test_report_escapes_hostile_manifest_values(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    evil = "<script>alert(1)</script>"
    m = make_manifest(name=evil)
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(m))
        export_bundle(store, m["run_id"], tmp_path / "b")
    page = (tmp_path / "b" / "report.html").read_text()
    assert evil not in page and "&lt;script&gt;" in page
    assert "Verdict: NOT REPLAYED" in page
    assert evil not in (tmp_path / "b" / "report.md").read_text()


def test_report_of_a_run_whose_replays_all_failed(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    m = make_manifest()
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(m))
        add_attempt(
            store,
            m["run_id"],
            "error",
            reason="no Docker engine",
            duration_s=0.1,
            body={"reason": "no Docker engine"},
        )
        res = export_bundle(store, m["run_id"], tmp_path / "b")
    assert res.verdict is None and not res.signed
    page = (tmp_path / "b" / "report.html").read_text()
    assert "Verdict: NO VERDICT" in page and "no Docker engine" in page
    assert _check(tmp_path / "b", None).ok


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_the_check_command_export_prints_works(
    cli: RunCli,
    replayed_store: tuple[Path, str],
    keypair: tuple[Path, Path],
    tmp_path: Path,
    signed: bool,
) -> None:
    """``export`` ends with the command that checks the bundle: run as printed, it passes
    (an unsigned bundle needs --allow-unsigned; a signed one names keygen's public key)."""
    _, run_id = replayed_store
    out = tmp_path / "b"
    r = cli("export", run_id, "--out", out, *(("--sign", keypair[0]) if signed else ()))
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if "check it with: replay-tui " in x]
    args = line.split("check it with: replay-tui ", 1)[1].split()
    assert args[:2] == ["verify", str(out)]
    if signed:
        assert args[2:] == ["--key", str(keypair[1])]
    checked = cli(*args)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # the count export gives is the count verify checks
    listed = re.search(r"files: the (\d+) that SHA256SUMS lists", r.stdout)
    matched = re.search(r"bundle intact: (\d+) files match", checked.stdout)
    assert listed and matched and listed[1] == matched[1], (r.stdout, checked.stdout)
