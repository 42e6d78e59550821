"""The bundle's SLSA v1 provenance, checked by ``replay-tui verify`` and by an independent
verifier: the real ``cosign verify-blob-attestation --type slsaprovenance1`` (Debian's
cosign, put in place by scripts/cosign-env.sh; a missing cosign is a failure, never a
skip), then a Rego policy requiring the recorded image digest, evaluated by an OPA
implementation (``regopy``) over the statement cosign verified."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from regopy import Interpreter

from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.keys import generate, load_public_key
from replay_tui.evidence.slsa import BUILD_TYPE, SLSA_NAME, SLSA_PREDICATE_TYPE
from replay_tui.evidence.verify import verify_bundle
from storage.manifest import canonical_json
from storage.store import RunStore
from tests.support.bundles import copy_bundle

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "docs" / "policies" / "slsa-image-digest.rego"


def cosign() -> str:
    d = Path(os.environ.get("REPLAY_TUI_COSIGN_DIR", "/var/lib/replay-tui-env/cosign"))
    exe = d / "usr" / "bin" / "cosign"
    if not os.access(exe, os.X_OK):
        pytest.fail(f"no cosign at {exe}: run scripts/cosign-env.sh (scripts/test.sh does)")
    return str(exe)


def statement(bundle: Path, name: str = SLSA_NAME) -> dict[str, Any]:
    env = json.loads((bundle / name).read_bytes())
    out: dict[str, Any] = json.loads(base64.b64decode(env["payload"]))
    return out


def cosign_verify(
    bundle: Path, pub: Path, digest: str | None = None
) -> subprocess.CompletedProcess[str]:
    subject = digest or statement(bundle)["subject"][0]["digest"]["sha256"]
    return subprocess.run(
        [
            cosign(), "verify-blob-attestation", "--key", str(pub),
            "--type", "slsaprovenance1", "--signature", str(bundle / SLSA_NAME),
            "--insecure-ignore-tlog", "--digest", subject, "--digestAlg", "sha256",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def policy_denies(stmt: dict[str, Any], image_digest: str) -> list[str]:
    """What the policy's ``deny`` rule says of ``stmt`` (empty: ``allow`` holds)."""
    rego = Interpreter()
    rego.add_module("policy", POLICY.read_text())
    rego.add_data_json(json.dumps({"image_digest": image_digest}))
    rego.set_input_term(json.dumps(stmt))
    out = rego.query("data.replaytui.slsa.deny")
    assert out.ok(), str(out)
    (reasons,) = json.loads(str(out))["expressions"]  # {"expressions": [[reasons...]]}
    assert isinstance(reasons, list)
    return [str(r) for r in reasons]


def _image_hex(bundle: Path) -> str:
    digest = json.loads((bundle / "manifest.json").read_text())["image"]["digest"]
    return str(digest.removeprefix("sha256:"))


def test_the_statement_fills_the_slsa_fields(bundle: Path) -> None:
    stmt = statement(bundle)
    main = statement(bundle, "provenance.intoto.jsonl")
    m = json.loads((bundle / "manifest.json").read_text())
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == SLSA_PREDICATE_TYPE
    assert stmt["subject"] == main["subject"]  # the artifacts by sha256
    bd, rd = stmt["predicate"]["buildDefinition"], stmt["predicate"]["runDetails"]
    assert bd["buildType"] == BUILD_TYPE
    ext = bd["externalParameters"]
    assert ext["command"] == m["argv"] and ext["config"] == m["config"]
    assert ext["seeds"] == m["randomness"] and ext["determinism"] == m["determinism"]
    deps = {d["name"]: d for d in bd["resolvedDependencies"]}
    assert deps["source"]["digest"] == {"gitCommit": m["code"]["commit"]}
    assert m["code"]["repo_url"] in deps["source"]["uri"]
    assert deps["image"]["digest"] == {"sha256": _image_hex(bundle)}
    for d in m["data"]:
        assert deps[f"data:{d['name']}"]["digest"] == {"sha256": d["sha256"]}
    assert rd["builder"]["id"].endswith("/host/" + m["environment"]["hostname"])
    assert rd["metadata"] == {
        "invocationId": m["run_id"],
        "startedOn": m["started_at"],
        "finishedOn": m["ended_at"],
    }
    (cmp,) = rd["byproducts"]
    assert cmp["name"] == "comparison.json" and cmp["annotations"]["verdict"] == "IDENTICAL"
    assert cmp["annotations"]["noise_floor"] is None  # none measured for this run


def test_cosign_verifies_it_and_the_policy_requires_the_image_digest(
    bundle: Path, keypair: tuple[Path, Path]
) -> None:
    r = cosign_verify(bundle, keypair[1])
    assert r.returncode == 0 and "Verified OK" in r.stderr + r.stdout, r.stderr
    stmt = statement(bundle)
    assert policy_denies(stmt, _image_hex(bundle)) == []
    assert policy_denies(stmt, "0" * 64) == [f"the run did not use image sha256:{'0' * 64}"]


def test_cosign_verifies_the_bundles_own_statement_too(
    bundle: Path, keypair: tuple[Path, Path]
) -> None:
    main = bundle / "provenance.intoto.jsonl"
    subject = statement(bundle, main.name)["subject"][0]["digest"]["sha256"]
    r = subprocess.run(
        [
            cosign(), "verify-blob-attestation", "--key", str(keypair[1]),
            "--type", "https://replay-tui.dev/provenance/replay/v1", "--signature", str(main),
            "--insecure-ignore-tlog", "--digest", subject, "--digestAlg", "sha256",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0 and "Verified OK" in r.stderr + r.stdout, r.stderr


def test_cosign_verifies_an_ed25519_signed_bundle_too(
    replayed_store: tuple[Path, str], tmp_path: Path
) -> None:
    store_path, run_id = replayed_store
    pair = generate(tmp_path / "ed.key", kind="ed25519")
    with RunStore(store_path) as store:
        export_bundle(store, run_id, tmp_path / "b", key_path=pair.private_path)
    r = cosign_verify(tmp_path / "b", pair.public_path)
    assert r.returncode == 0 and "Verified OK" in r.stderr + r.stdout, r.stderr


def _forge(bundle: Path, tmp_path: Path, edit: Any) -> Path:
    """A copy whose SLSA statement was edited, keeping the original signature."""
    b = copy_bundle(bundle, tmp_path)
    env = json.loads((b / SLSA_NAME).read_bytes())
    stmt = json.loads(base64.b64decode(env["payload"]))
    edit(stmt)
    env["payload"] = base64.b64encode(canonical_json(stmt)).decode()
    (b / SLSA_NAME).write_bytes(canonical_json(env) + b"\n")  # the form export writes
    return b


def test_a_tampered_statement_fails_cosign_and_verify(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    def other_image(stmt: dict[str, Any]) -> None:
        for d in stmt["predicate"]["buildDefinition"]["resolvedDependencies"]:
            if d["name"] == "image":
                d["digest"]["sha256"] = "0" * 64

    b = _forge(bundle, tmp_path, other_image)
    assert policy_denies(statement(b), "0" * 64) == []  # the policy alone would be fooled...
    r = cosign_verify(b, keypair[1])
    assert r.returncode != 0 and "Verified OK" not in r.stderr + r.stdout  # ...not cosign
    chk = verify_bundle(b, public_key=load_public_key(keypair[1]))
    assert not chk.ok
    assert [(p.file, p.kind) for p in chk.problems] == [
        (SLSA_NAME, "signature"),  # its signature no longer verifies
        (SLSA_NAME, "changed"),  # and SHA256SUMS lists other bytes
    ]
    (st,) = [s for s in chk.statements if s.name == SLSA_NAME]
    assert st.present and not st.checked


def test_cosign_refuses_another_key_and_another_subject(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    other = generate(tmp_path / "other.key")
    assert cosign_verify(bundle, other.public_path).returncode != 0
    assert cosign_verify(bundle, keypair[1], digest="1" * 64).returncode != 0
