"""A replay of a run recorded without deterministic algorithms imports torch while the
run runs, so the tensor comparison after it does not start with torch's import.

Each case runs in a fresh interpreter (pytest has torch loaded already) and says whether
torch was imported by the warm-up and nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import subprocess_env

PROBE = """\
import json, sys
from replay_tui.replay.runner import warm_tensor_comparison
from storage.manifest import manifest_from_data
from tests.support.factories import apply_overrides, realistic_manifest
overrides = json.loads(sys.argv[1])
m = manifest_from_data(apply_overrides(realistic_manifest(0), overrides))
assert "torch" not in sys.modules
thread = warm_tensor_comparison(m)
if thread is not None:
    thread.join()
print(json.dumps([thread is not None, "torch" in sys.modules,
                  "replay_tui.compare.tensors" in sys.modules]))
"""

ONLY_A_LOG = [{"path": "train.log", "kind": "log", "sha256": "0" * 64, "size_bytes": 1}]


@pytest.mark.parametrize(
    ("overrides", "warmed"),
    [
        ({"determinism__deterministic_algorithms": False}, True),
        ({"determinism__deterministic_algorithms": None}, True),  # not recorded: likely off
        ({"determinism__deterministic_algorithms": True}, False),  # bit for bit expected
        ({"determinism__deterministic_algorithms": False, "outputs__artifacts": ONLY_A_LOG}, False),
    ],
)
def test_torch_is_imported_while_the_run_runs_only_where_tensors_will_be_compared(
    overrides: dict[str, object], warmed: bool
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(overrides)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [warmed, warmed, warmed]
