"""The interpreter a recorded command ran is recorded (path as found, version, virtual
environment), and a replay whose command cannot start (``python`` not on PATH) is an
infrastructure failure (exit 3), never a failed reproduction."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from storage.store import RunStore
from tests.support.training import cli_env, git, replay_tui

PROGRAM = """\
from pathlib import Path
Path("out").mkdir(exist_ok=True)
Path("out/result.txt").write_text("42\\n")
print("step 0 loss 1.0")
"""


def test_interpreter_recorded_and_a_command_that_cannot_start_is_infra(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text(PROGRAM)
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "program")
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
    # a host whose PATH has no python (git still there): the command cannot start
    env = cli_env()
    env["PATH"] = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    assert not any((Path(p) / "python").exists() for p in env["PATH"].split(os.pathsep))
    rep = replay_tui(store, "replay", run_id, "--backend", "local", "--json", env=env)
    assert rep.returncode == 3, (rep.returncode, rep.stdout[-2000:], rep.stderr[-2000:])
    assert "cannot start" in rep.stdout + rep.stderr
