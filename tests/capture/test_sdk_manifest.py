"""The SDK's standalone manifest and the launcher's are built from the same groups.

A run records its mixed-precision mode with ``replay_tui.mixed_precision``; both the
manifest ``record`` stores and the one the SDK writes on its own carry it, and their
``randomness`` and ``determinism`` groups have the same fields.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from storage.manifest import parse_manifest
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.training import cli_env, replay_tui

SCRIPT = """\
import replay_tui
replay_tui.mixed_precision("bf16")
replay_tui.seed_everything(3)
replay_tui.deterministic()
run = replay_tui.start_run("mp", config={"lr": 0.1})
run.log_metric("loss", 1.0, 0)
print("manifest:", run.finish(manifest_path="runs/standalone.json"))
"""


def test_mixed_precision_reaches_both_manifests_and_groups_match(tmp_path: Path) -> None:
    repo = commit_repo(tmp_path / "repo", {"train.py": SCRIPT}, "mp", ignore="runs/\n")
    # Standalone: no launcher, the SDK writes the manifest itself.
    proc = subprocess.run(
        [sys.executable, "train.py"], cwd=repo, env=cli_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    standalone = parse_manifest((repo / "runs" / "standalone.json").read_bytes())
    assert standalone.determinism.mixed_precision == "bf16"
    assert standalone.randomness.seed == 3
    # Recorded by the launcher.
    store = tmp_path / "store" / "runs.db"
    rec = replay_tui(store, "record", "--json", "--", "python", "train.py", cwd=repo)
    assert rec.returncode == 0, rec.stderr[-2000:]
    with RunStore(store) as s:
        recorded = s.manifest(json.loads(rec.stdout)["run_id"])
    assert recorded.determinism.mixed_precision == "bf16"
    assert recorded.determinism.deterministic_algorithms is True
    for group in ("randomness", "determinism"):
        a = getattr(standalone, group).model_dump(exclude_unset=True)
        b = getattr(recorded, group).model_dump(exclude_unset=True)
        assert a.keys() == b.keys(), group
        assert a == b, group
