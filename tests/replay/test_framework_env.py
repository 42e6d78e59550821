"""Item 4 of the frameworks issue: the frameworks' switches are recorded and replayed.

``accelerate launch`` replayed IDENTICAL only when the shell had ``ACCELERATE_USE_CPU``:
the variable was not recorded, and a local replay inherited the host's variables.  Now
the families that change what is computed (``ACCELERATE_*``, ``PL_*``, ``HF_*``,
``TORCH_*``, ``NCCL_*``...) are recorded, credentials left out (``HF_TOKEN``), and a local
replay passes the recorded values and clears the host's others.

A real program (no framework needed: it does what accelerate does with the variable, a
different computation when it is set), recorded and replayed on the local backend.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.training import cli_env, program_repo, record_run, replay_tui

PROGRAM = """\
import os, pathlib
out = pathlib.Path("out"); out.mkdir(exist_ok=True)
device = "cpu" if os.environ.get("ACCELERATE_USE_CPU") == "1" else "default"
(out / "result.txt").write_text(f"device {device}\\n")
print("step 1 loss", 0.5 if device == "cpu" else 0.7)
"""


def _repo(tmp_path: Path) -> Path:
    return program_repo(tmp_path / "repo", {"prog.py": PROGRAM}, "an accelerate switch")


def _record(store: Path, repo: Path, env: dict[str, str]) -> str:
    return record_run(store, repo, "--artifact", "out/*", "--", "python", "prog.py", env=env)


def _replay(store: Path, rid: str, env: dict[str, str]) -> dict[str, object]:
    proc = replay_tui(
        store,
        "replay",
        rid,
        "--backend",
        "local",
        "--times",
        "1",
        "--quiet",
        "--json",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(proc.stdout)["replays"]
    return dict(r)


def test_a_recorded_switch_is_replayed_from_a_shell_without_it(tmp_path: Path) -> None:
    repo, store = _repo(tmp_path), tmp_path / "runs.db"
    with_it = {**cli_env(), "ACCELERATE_USE_CPU": "1", "HF_TOKEN": "hf_secret_value"}
    rid = _record(store, repo, with_it)
    shown = json.loads(replay_tui(store, "show", rid, "--json").stdout)
    env = shown["manifest"]["env"]
    assert env.get("ACCELERATE_USE_CPU") == "1"
    assert "HF_TOKEN" not in env  # a credential is never recorded
    assert "hf_secret_value" not in json.dumps(shown)
    without = {k: v for k, v in cli_env().items() if not k.startswith("ACCELERATE_")}
    assert _replay(store, rid, without)["verdict"] == "IDENTICAL"


def test_the_hosts_own_switch_is_cleared_for_a_local_replay(tmp_path: Path) -> None:
    repo, store = _repo(tmp_path), tmp_path / "runs.db"
    plain = {k: v for k, v in cli_env().items() if not k.startswith("ACCELERATE_")}
    rid = _record(store, repo, plain)
    shown = json.loads(replay_tui(store, "show", rid, "--json").stdout)
    assert "ACCELERATE_USE_CPU" not in shown["manifest"]["env"]
    assert _replay(store, rid, {**plain, "ACCELERATE_USE_CPU": "1"})["verdict"] == "IDENTICAL"
