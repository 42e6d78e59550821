"""A store holding an original, a noise floor of three replicas of it, and a replay that is
beyond the fixed tolerance: WITHIN_NOISE (the replay wobbles as the replicas do) or
DIVERGED (the replay's loss drops away from step 40).  Real SQLite, the real comparison
(``compare_and_store``), the floor stored as ``replay --times`` stores it.

``loss`` has a measured spread at its final value; ``val_loss``'s replicas agree more
closely than 0.1 % of its value, so its half-widths are raised to the numerical floor
(``floored``).  The checkpoint's file hash differs while its tensors are the same (a
different zip container: identical), and the log's bytes differ (not judged)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.compare.floor import FloorRecord
from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.tolerance import Tolerance
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.helpers.replays import add_compared_replay
from tests.support.bundles import replay_of

LOSS = (1.5314, 1.5330, 1.5340)
"""The replicas' final loss: a spread the rule measures."""
VAL = (0.90000, 0.90001, 0.90002)
"""The replicas' final val_loss: closer than 0.1 %, so the floor sets the band."""
EXIT_STEP = 40


@dataclass(frozen=True)
class NoisyPair:
    store: Path
    original: str
    replay: str
    comparison_id: int
    verdict: str


def _outputs(data: dict[str, Any], loss: float, val: float, shift: float) -> None:
    wobble = (loss - 1.533) * 0.01  # each run's own noise along the curve
    data["outputs"]["metrics"] = {"loss": loss, "val_loss": val}
    data["outputs"]["metric_history"] = {
        "loss": [
            [s, 3.0 - s / 100 + wobble + (shift if s >= EXIT_STEP else 0.0)]
            for s in range(0, 101, 10)
        ],
        "val_loss": [
            [s, 2.5 - s / 100 + (val - 0.9) + (shift if s >= EXIT_STEP else 0.0)]
            for s in range(0, 101, 10)
        ],
    }
    data["outputs"]["metric_times"] = {}
    arts = data["outputs"]["artifacts"]
    data["outputs"]["artifacts"] = [
        a for a in arts if a["path"] in ("checkpoints/final.pt", "logs/train.log")
    ]


def noisy_pair(
    store_path: Path, make_manifest: MakeManifest, *, diverged: bool = False
) -> NoisyPair:
    """The store (see the module doc); ``diverged``: the replay is a real change."""
    orig = make_manifest(index=0)
    _outputs(orig, 1.5330, 0.90001, 0.0)
    rep = replay_of(orig, make_manifest(index=1)["run_id"])
    if diverged:
        _outputs(rep, 1.4274, 0.85, -0.1)
    else:
        _outputs(rep, 1.5325, 0.900015, 0.0)
    for a in rep["outputs"]["artifacts"]:  # other bytes; the checkpoint's tensors the same
        a["sha256"] = ("e" if a["kind"] == "checkpoint" else "f") * 64
    replicas = []
    for i, (loss, val) in enumerate(zip(LOSS, VAL, strict=True)):
        r = copy.deepcopy(orig)
        _outputs(r, loss, val, 0.0)
        replicas.append((f"replica-{i + 1}", r))
    floor = NoiseFloor.from_replicas(
        [r["outputs"]["metric_history"] for _, r in replicas],
        [r["outputs"]["metrics"] for _, r in replicas],
        labels=[label for label, _ in replicas],
    )
    record = FloorRecord(floor, orig["run_id"], floor.labels, Tolerance())
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(orig))
        store.ingest(manifest_from_data(rep))
        store.add_noise_floor(orig["run_id"], 3, record.to_dict())
        verdict, cid = add_compared_replay(store, orig["run_id"], rep["run_id"])
    return NoisyPair(store_path, orig["run_id"], rep["run_id"], cid, verdict)
