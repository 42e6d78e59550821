"""The bundle's CycloneDX 1.6 ML-BOM, validated against the CycloneDX 1.6 JSON schema
that ``cyclonedx-python-lib`` ships (loaded from its package data, with the SPDX and JSF
schemas it refers to), over a fixture's bundle and a real recorded run's."""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from replay_tui.evidence.keys import load_public_key
from replay_tui.evidence.mlbom import BOM_NAME, purl
from replay_tui.evidence.verify import verify_bundle
from tests.support.bundles import copy_bundle
from tests.support.training import QUICK, make_repo, record_example, replay_tui

SCHEMAS = files("cyclonedx.schema") / "_res"


def validator() -> jsonschema.Draft7Validator:
    def load(name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
        return data

    bom = load("bom-1.6.SNAPSHOT.schema.json")
    base = "http://cyclonedx.org/schema/"
    registry: Registry = Registry()
    for name in ("spdx.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json"):
        registry = registry.with_resource(base + name, Resource.from_contents(load(name)))
    return jsonschema.Draft7Validator(
        bom, registry=registry, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
    )


def errors(doc: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(doc)
    ]


def test_the_bom_is_valid_cyclonedx_1_6_with_model_datasets_packages_verdict(
    bundle: Path,
) -> None:
    bom = json.loads((bundle / BOM_NAME).read_text())
    assert errors(bom) == []
    assert bom["specVersion"] == "1.6" and bom["bomFormat"] == "CycloneDX"
    m = json.loads((bundle / "manifest.json").read_text())
    by_type: dict[str, list[dict[str, Any]]] = {}
    for c in bom["components"]:
        by_type.setdefault(c["type"], []).append(c)
    (model,) = by_type["machine-learning-model"]
    hashed = {a["path"]: a["sha256"] for a in m["outputs"]["artifacts"] if a["sha256"]}
    assert {f["name"]: f["hashes"][0]["content"] for f in model["components"]} == hashed
    assert {d["name"]: d["hashes"][0]["content"] for d in by_type["data"]} == {
        d["name"]: d["sha256"] for d in m["data"]
    }
    assert [r["ref"] for r in model["modelCard"]["modelParameters"]["datasets"]] == [
        d["bom-ref"] for d in by_type["data"]
    ]
    metrics = model["modelCard"]["quantitativeAnalysis"]["performanceMetrics"]
    assert metrics[0]["type"] == "replay-verdict" and metrics[0]["value"] == "IDENTICAL"
    libs = {c["purl"] for c in by_type["library"]}
    for line in m["environment"]["packages"]:
        name, version = line.split("==")
        assert purl(name, version) in libs
    assert purl("Foo_Bar.baz", "1.0+cu124") == "pkg:pypi/foo-bar-baz@1.0%2Bcu124"


def test_a_bom_edited_out_of_the_schema_fails_it_and_verify(
    bundle: Path, keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    bom = json.loads((bundle / BOM_NAME).read_text())
    bad = copy.deepcopy(bom)
    bad["components"][0]["hashes"][0]["content"] = "not-a-hash"
    assert any("hashes/0/content" in e for e in errors(bad))
    bad = copy.deepcopy(bom)
    bad["components"][0]["type"] = "model"
    assert errors(bad)
    # a bundle whose BOM was edited (even validly) fails verify, naming it
    b = copy_bundle(bundle, tmp_path)
    edited = copy.deepcopy(bom)
    edited["components"][0]["modelCard"]["quantitativeAnalysis"]["performanceMetrics"][0][
        "value"
    ] = "DIVERGED"
    assert errors(edited) == []
    (b / BOM_NAME).write_text(json.dumps(edited, indent=2, sort_keys=True) + "\n")
    chk = verify_bundle(b, public_key=load_public_key(keypair[1]))
    assert [(p.file, p.kind) for p in chk.problems] == [(BOM_NAME, "changed")]


@pytest.mark.slow
def test_a_real_runs_bom_is_valid(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    out = record_example(store, repo, *QUICK)
    assert out["_returncode"] == 0, out["_stderr"][-3000:]
    r = replay_tui(store, "export", out["run_id"], "--out", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    bom = json.loads((tmp_path / "b" / BOM_NAME).read_text())
    assert errors(bom) == []
    (model,) = [c for c in bom["components"] if c["type"] == "machine-learning-model"]
    assert len(model["components"]) >= 2 and any(c["type"] == "library" for c in bom["components"])
    (data,) = [c for c in bom["components"] if c["type"] == "data"]
    assert len(data["hashes"][0]["content"]) == 64
