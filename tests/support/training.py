"""Helpers for tests that record real training runs: a git repo with the example script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_mlp.py"
NUMPY_PROGRAM = Path(__file__).resolve().parent / "programs" / "train_numpy.py"
"""The numpy-only trainer (no torch start: a tenth of a second, not seconds), for tests
that need a recorded run but not torch: ``make_repo(path, numpy=True)`` and
``record_example(..., script=NUMPY_SCRIPT)``."""
NUMPY_SCRIPT = NUMPY_PROGRAM.name
QUICK = ["--epochs", "1", "--samples", "256", "--workers", "0"]
LOSS_REGEX = r"step (?P<step>\d+) loss (?P<value>[0-9.eE+-]+)"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def make_repo(path: Path, *, numpy: bool = False) -> Path:
    """A real git repository holding the example script (``numpy``: the numpy-only
    trainer, ``NUMPY_SCRIPT``) and a data file (ignored)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    program = NUMPY_PROGRAM if numpy else EXAMPLE
    shutil.copy(program, path / program.name)
    (path / ".gitignore").write_text("out/\ndata/\nruns/\n")
    write_data(path / "data" / "train.npz", seed=0)
    git(path, "add", program.name, ".gitignore")
    git(path, "commit", "-q", "-m", "example")
    return path


def program_repo(path: Path, files: dict[str, str], message: str = "program") -> Path:
    """A real git repository of ``files`` (name -> text) in one commit, ``out/`` ignored."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).write_text(text)
    (path / ".gitignore").write_text("out/\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", message)
    return path


def record_run(store: Path, repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``record --json ARGS...`` in ``repo`` (ARGS ends with ``--`` and the command);
    the run id, the command having succeeded."""
    proc = replay_tui(store, "record", "--json", *args, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return str(json.loads(proc.stdout)["run_id"])


def write_data(path: Path, seed: int, n: int = 256) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, 16)).astype(np.float32)
    np.savez(path, x=x, y=x[:, :4].argmax(1))


def cli_env() -> dict[str, str]:
    """Environment whose ``python`` is this interpreter (it has torch)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("REPLAY_TUI_SEED", None)
    env.pop("PYTHONHASHSEED", None)
    env.pop("REPLAY_TUI_STORE", None)
    return env


def replay_tui(
    store: Path,
    *args: str | Path,
    cwd: Path | None = None,
    check: bool = False,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``replay-tui --store STORE ARGS...`` in a subprocess (``env``: :func:`cli_env`)."""
    exe = Path(sys.executable).parent / "replay-tui"
    return subprocess.run(
        [str(exe), "--store", str(store), *map(str, args)],
        cwd=cwd,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def record_example(
    store: Path,
    repo: Path,
    *script_args: str,
    seed: int | None = 1,
    extra: list[str] | None = None,
    script: str = "train_mlp.py",
) -> dict[str, Any]:
    """Record the example (``script``: ``NUMPY_SCRIPT`` in a ``make_repo(numpy=True)``)
    with the real launcher; returns the --json summary."""
    opts = ["record", "--json", "--artifact", "out/*", "--data", "data/train.npz"]
    if seed is not None:
        opts += ["--seed", str(seed)]
    opts += extra or []
    proc = replay_tui(
        store,
        *opts,
        "--",
        "python",
        script,
        "--data",
        "data/train.npz",
        *script_args,
        cwd=repo,
    )
    try:
        out: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"record printed no JSON: {proc.stdout}\n{proc.stderr}") from None
    out["_returncode"] = proc.returncode
    out["_stderr"] = proc.stderr
    return out


def record_in_image(
    store: Path, repo: Path, image: str, *script: str, extra: tuple[str, ...] = ()
) -> str:
    """Record ``python3 SCRIPT...`` in ``image`` with the real launcher (seed 1, outputs
    in out/, data/train.npz); returns the run id."""
    proc = replay_tui(
        store,
        "record",
        "--json",
        "--seed",
        "1",
        "--image",
        image,
        "--artifact",
        "out/*",
        "--data",
        "data/train.npz",
        *extra,
        "--",
        "python3",
        *script,
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(json.loads(proc.stdout)["run_id"])
