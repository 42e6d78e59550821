"""Each judged item's one state, decided by the comparison (fixed numbers)."""

from __future__ import annotations

from replay_tui.compare.comparison import compare_runs
from replay_tui.compare.states import counts, with_states
from replay_tui.compare.stored import comparison_from_dict
from storage.manifest import manifest_from_data
from tests.compare.test_noise_verdict import _context, _run
from tests.conftest import MakeManifest

FILE = {"path": "out/result.txt", "size_bytes": 3, "kind": "file"}


def test_a_declared_file_that_differs_is_never_noise(make_manifest: MakeManifest) -> None:
    a, b = _run(make_manifest, 1.5330), _run(make_manifest, 1.5325)
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    da["outputs"]["artifacts"] = [FILE | {"sha256": "a" * 64}]
    db["outputs"]["artifacts"] = [FILE | {"sha256": "b" * 64}]
    c = compare_runs(manifest_from_data(da), manifest_from_data(db), noise=_context(make_manifest))
    assert c.verdict == "DIVERGED"  # the metrics are within noise; the file is not
    assert c.reasons[0] == "file out/result.txt: a declared output's bytes differ"
    assert c.artifacts[0].state == "outside_tolerance" and c.metrics[0].state == "within_noise"


def test_states_count_within_noise_as_reproduced_and_leave_out_the_unjudged() -> None:
    assert counts(["identical", "within_noise", "not_judged", "volatile"]) == (2, 2)
    assert counts(["outside_noise", "missing", "within_tolerance"]) == (1, 3)


def test_a_stored_body_without_states_is_shown_by_the_same_rule(
    make_manifest: MakeManifest,
) -> None:
    a, b = _run(make_manifest, 1.5330), _run(make_manifest, 1.5325)
    c = compare_runs(a, b, noise=_context(make_manifest))
    body = c.to_dict()
    for m in body["metrics"]:
        del m["state"]
    for e in body["noise"]["endpoints"]:
        del e["state"]
    old = comparison_from_dict(body)
    assert old.to_dict() == body  # read back, its bytes unchanged
    assert with_states(old).to_dict() == c.to_dict()
