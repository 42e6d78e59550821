"""How a comparison beyond the tolerance is judged against a stored floor (fixed numbers)."""

from __future__ import annotations

from typing import Any

from replay_tui.compare.floor import NoiseContext, StoredFloor
from replay_tui.compare.noise_rule import NoiseFloor, NoiseParams
from replay_tui.compare.stored import comparison_from_dict
from replay_tui.compare.verdict import compare_runs
from storage.manifest import RunManifest, manifest_from_data
from tests.conftest import MakeManifest

REPLICAS = (1.5314, 1.5330, 1.5340)


def _run(make: MakeManifest, final: float, shift: float = 0.0) -> RunManifest:
    data: dict[str, Any] = make(index=1)
    data["outputs"]["artifacts"] = []
    data["outputs"]["metrics"] = {"loss": final}
    wobble = (final - 1.533) * 0.01  # each run's own noise along the curve
    data["outputs"]["metric_history"] = {
        "loss": [
            [s, 3.0 - s / 100 + wobble + (shift if s >= 40 else 0.0)] for s in range(0, 101, 10)
        ]
    }
    data["outputs"]["metric_times"] = {}
    return manifest_from_data(data)


def _context(make: MakeManifest, margin: float | None = None) -> NoiseContext:
    runs = [_run(make, v) for v in REPLICAS]
    floor = NoiseFloor.from_replicas(
        [dict(r.outputs.metric_history) for r in runs],
        [dict(r.outputs.metrics) for r in runs],
        labels=["r1", "r2", "r3"],
    )
    stored = StoredFloor(7, "orig", "2026-11-28T00:00:00.000Z", floor, None)
    return NoiseContext(stored, "b", NoiseParams(margin=margin))


def test_beyond_tolerance_but_within_noise_is_within_noise(make_manifest: MakeManifest) -> None:
    a, b = _run(make_manifest, 1.5330), _run(make_manifest, 1.5325)
    plain = compare_runs(a, b)
    assert plain.verdict == "DIVERGED" and plain.noise is None  # no floor: as before
    c = compare_runs(a, b, noise=_context(make_manifest))
    assert c.verdict == "WITHIN_NOISE" and c.exit_code == 0
    assert c.floor is not None and c.floor["fact_id"] == 7 and c.floor["candidate"] == "b"
    assert any(r.startswith("beyond the fixed tolerance") for r in c.reasons)
    back = comparison_from_dict(c.to_dict())  # stored and read back, typed
    assert back.verdict == "WITHIN_NOISE" and back.noise is not None
    assert back.noise.within and back.floor == c.floor


def test_a_real_change_is_diverged_with_the_step_it_leaves_the_band(
    make_manifest: MakeManifest,
) -> None:
    a, b = _run(make_manifest, 1.5330), _run(make_manifest, 1.4274, shift=-0.1)
    c = compare_runs(a, b, noise=_context(make_manifest))
    assert c.verdict == "DIVERGED" and c.noise is not None and not c.noise.within
    band = c.noise.band("loss")
    assert band is not None and band.leaves_band_at == 40
    assert any("leaves the noise band at step 40" in r for r in c.reasons)


def test_a_band_wider_than_the_declared_margin_is_a_gap(make_manifest: MakeManifest) -> None:
    a, b = _run(make_manifest, 1.5330), _run(make_manifest, 1.5325)
    c = compare_runs(a, b, noise=_context(make_manifest, margin=1e-4))
    assert c.verdict == "WITHIN_NOISE"  # a pass, but one that says little
    gaps = [g for g in c.gaps if g.code == "NOISE_TOO_WIDE"]
    assert len(gaps) == 1 and "wider than the declared margin 0.010%" in gaps[0].message
    assert c.margin == 1e-4
