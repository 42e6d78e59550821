"""The interpreter a recorded command ran is recorded (path as found, version, virtual
environment), and a replay whose command cannot start (``python`` not on PATH) is an
infrastructure failure (exit 3), never a failed reproduction."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from storage.store import RunStore
from tests.helpers.commands import RECORD_DEEP_OUTPUTS
from tests.support.training import cli_env, program_repo, replay_tui

PROGRAM = """\
from pathlib import Path
Path("out").mkdir(exist_ok=True)
Path("out/result.txt").write_text("42\\n")
print("step 0 loss 1.0")
"""


def test_interpreter_recorded_and_a_command_that_cannot_start_is_infra(tmp_path: Path) -> None:
    repo = program_repo(tmp_path / "repo", {"train.py": PROGRAM})
    store = tmp_path / "store" / "runs.db"
    rec = replay_tui(
        store, "record", "--json", "--artifact", "out/**", "--", "python", "train.py", cwd=repo
    )
    assert rec.returncode == 0, rec.stderr[-2000:]
    run_id = json.loads(rec.stdout)["run_id"]
    with RunStore(store) as s:
        m = s.manifest(run_id)
    it = m.environment.interpreter
    venv_bin = Path(sys.executable).parent
    assert it is not None and it.path == str(venv_bin / "python")
    assert it.virtual_env == str(venv_bin.parent)  # the venv's pyvenv.cfg is there
    assert it.version == m.environment.python_version and it.version
    # a host whose PATH has no python (git still there): the recorded interpreter runs
    env = cli_env()
    env["PATH"] = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    assert not any((Path(p) / "python").exists() for p in env["PATH"].split(os.pathsep))
    rep = replay_tui(store, "replay", run_id, "--backend", "local", env=env)
    assert rep.returncode == 0, (rep.returncode, rep.stdout[-2000:], rep.stderr[-2000:])
    assert f"runs the recorded interpreter {venv_bin / 'python'}" in rep.stdout + rep.stderr


def test_a_recorded_interpreter_that_is_gone_is_said_and_a_command_that_cannot_start_is_infra(
    tmp_path: Path,
) -> None:
    """Recorded with a ``python`` of its own (a link in a folder first on PATH), which is
    gone by the replay, on a host whose PATH has no python at all: the replay says the
    recorded interpreter is not here, and the command that cannot start is exit 3."""
    repo = program_repo(tmp_path / "repo", {"train.py": PROGRAM})
    own = tmp_path / "own-bin"
    own.mkdir()
    (own / "python").symlink_to(sys.executable)
    env = cli_env()
    env["PATH"] = os.pathsep.join([str(own), *(p for p in ("/usr/bin", "/bin"))])
    store = tmp_path / "store" / "runs.db"
    rec = replay_tui(store, *RECORD_DEEP_OUTPUTS, "--", "python", "train.py", cwd=repo, env=env)
    assert rec.returncode == 0, rec.stderr[-2000:]
    run_id = json.loads(rec.stdout)["run_id"]
    (own / "python").unlink()
    rep = replay_tui(store, "replay", run_id, "--backend", "local", env=env)
    assert rep.returncode == 3, (rep.returncode, rep.stdout[-2000:], rep.stderr[-2000:])
    said = rep.stdout + rep.stderr
    assert f"the recorded interpreter {own / 'python'}" in said and "is not on this host" in said
    assert "cannot start" in said
