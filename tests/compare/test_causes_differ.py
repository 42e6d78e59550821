"""Probable causes are what differs between the two runs; what both share is listed as
shared; the headline is the first reason, and a different set of artifacts leads."""

from __future__ import annotations

import copy
from typing import Any

from replay_tui.compare.comparison import compare_runs
from storage.manifest import RunManifest, manifest_from_data
from tests.conftest import MakeManifest


def _pair(make: MakeManifest) -> tuple[dict[str, Any], dict[str, Any]]:
    a = make(index=0)
    b = copy.deepcopy(a)
    b["run_id"] = make(index=1)["run_id"]
    name = next(iter(b["outputs"]["metrics"]))
    b["outputs"]["metrics"][name] += 1.0  # beyond the tolerance: DIVERGED
    return a, b


def _m(d: dict[str, Any]) -> RunManifest:
    return manifest_from_data(d)


def test_a_gap_both_runs_share_is_shared_not_a_cause(make_manifest: MakeManifest) -> None:
    a, b = _pair(make_manifest)
    a["randomness"] = {}
    b["randomness"] = {}
    c = compare_runs(_m(a), _m(b))
    assert c.verdict == "DIVERGED"
    assert not any("no seed recorded" in x for x in c.probable_causes)
    assert any(x.startswith("no seed recorded (SEED_UNKNOWN") for x in c.shared_causes)
    assert "in both runs" in c.shared_causes[0]
    assert c.to_dict()["shared_causes"] == list(c.shared_causes)


def test_a_gap_of_one_run_alone_is_a_probable_cause(make_manifest: MakeManifest) -> None:
    a, b = _pair(make_manifest)
    a["randomness"] = {}
    b["randomness"] = {"seed": 7}
    c = compare_runs(_m(a), _m(b))
    assert "A only: no seed recorded (SEED_UNKNOWN, randomness.seed)" in c.probable_causes
    assert not any("SEED_UNKNOWN" in x for x in c.shared_causes)
    assert "shared_causes" not in c.to_dict()  # nothing shared: the body as before


def test_a_different_set_of_artifacts_leads_the_reasons_and_the_headline(
    make_manifest: MakeManifest,
) -> None:
    a, b = _pair(make_manifest)
    extra = [
        {"path": f"out/extra{i}.bin", "sha256": f"{i}" * 64, "size_bytes": 1, "kind": "file"}
        for i in range(4)
    ]
    b["outputs"]["artifacts"] = [*b["outputs"]["artifacts"], *extra]
    c = compare_runs(_m(a), _m(b))
    assert c.verdict == "DIVERGED"
    assert c.reasons[0] == (
        "the two runs' sets of artifacts differ: 4 in B only (out/extra0.bin, out/extra1.bin,"
        " out/extra2.bin and 1 more)"
    )
    assert c.headline == f"not reproduced: {c.reasons[0]}"
