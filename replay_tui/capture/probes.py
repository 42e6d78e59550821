"""Probes that read the world a run happens in: git, packages, OS, hardware, env vars.

Every probe returns ``None`` (or an empty value) for what it cannot know; absence is
recorded as absence, never as an error and never as a guess.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# Variables that change what training computes.  Prefixes end with '_'.
TRAINING_ENV = (
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "TORCH_CUDNN_V8_API_ENABLED",
    "CUBLAS_WORKSPACE_CONFIG",
    "NCCL_",
    "PYTORCH_",
    "TORCH_DETERMINISTIC",
    "REPLAY_TUI_SEED",
    "REPLAY_TUI_DETERMINISM",
)


def training_env(environ: Mapping[str, str], extra: Sequence[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` that affect training, plus the ones named in ``extra``."""
    out: dict[str, str] = {}
    for k, v in environ.items():
        if k in extra or any(
            (k.startswith(p) if p.endswith("_") else k == p) for p in TRAINING_ENV
        ):
            out[k] = v
    return dict(sorted(out.items()))


# -- git ------------------------------------------------------------------------------


@dataclass
class GitState:
    root: Path | None = None
    repo_url: str | None = None
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    diff: bytes | None = None
    untracked: list[str] = field(default_factory=list)
    workdir: str = "."


def scrub_url(url: str) -> str:
    """Remove credentials from a remote URL before it is recorded."""
    with contextlib.suppress(ValueError):
        parts = urlsplit(url)
        if parts.username or parts.password:
            host = parts.hostname or ""
            if parts.port:
                host += f":{parts.port}"
            return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


def probe_git(cwd: Path) -> GitState:
    """Code identity of ``cwd`` via GitPython: commit, branch, dirty flag and the diff."""
    import git

    try:
        repo = git.Repo(cwd, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return GitState()
    try:
        root = Path(repo.working_tree_dir or cwd).resolve()
        state = GitState(root=root)
        state.workdir = os.path.relpath(cwd.resolve(), root).replace(os.sep, "/")
        try:
            state.commit = repo.head.commit.hexsha
        except ValueError:  # no commits yet
            return state
        if not repo.head.is_detached:
            state.branch = repo.active_branch.name
        remotes = list(repo.remotes)
        if remotes:
            origin = next((r for r in remotes if r.name == "origin"), remotes[0])
            urls = list(origin.urls)
            state.repo_url = scrub_url(urls[0]) if urls else None
        state.untracked = sorted(repo.untracked_files)
        state.dirty = repo.is_dirty(untracked_files=False)
        if state.dirty:
            proc = subprocess.run(
                ["git", "diff", "--binary", "HEAD"],
                cwd=root,
                capture_output=True,
                check=True,
            )
            state.diff = proc.stdout
        return state
    finally:
        repo.close()


# -- packages, OS ---------------------------------------------------------------------

_PACKAGES_SNIPPET = (
    "import importlib.metadata as m, json, sys;"
    "print(json.dumps({'python': sys.version.split()[0], 'packages': sorted({"
    "f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions() if d.metadata['Name']})}))"
)


@dataclass
class PythonEnv:
    python_version: str | None = None
    packages: list[str] | None = None
    packages_sha256: str | None = None


def packages_sha256(packages: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(packages)).encode("utf-8")).hexdigest()


def probe_python(interpreter: str) -> PythonEnv:
    """Python version and ``name==version`` list of the interpreter that runs the command."""
    try:
        proc = subprocess.run(
            [interpreter, "-I", "-c", _PACKAGES_SNIPPET],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        data = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return PythonEnv()
    pkgs = [str(p) for p in data["packages"]]
    return PythonEnv(str(data["python"]), pkgs, packages_sha256(pkgs))


def interpreter_for(argv: Sequence[str], fallback: str) -> str:
    """The Python that will run ``argv``: argv[0] when it is a python, else ``fallback``."""
    if argv:
        exe = shutil.which(argv[0])
        if exe and re.fullmatch(r"python[0-9.]*", Path(argv[0]).name):
            return exe
    return fallback


def os_description() -> str:
    with contextlib.suppress(OSError):
        info = platform.freedesktop_os_release()
        return info.get("PRETTY_NAME") or info.get("NAME") or platform.system()
    return f"{platform.system()} {platform.version()}"


def kernel() -> str:
    return platform.release()


def hostname() -> str:
    return socket.gethostname()


# -- hardware -------------------------------------------------------------------------


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


@dataclass
class GpuProbe:
    gpus: list[dict[str, object]] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None


def probe_gpus(nvidia_smi: str | None = None) -> GpuProbe:
    """GPUs through nvidia-smi when present; an empty list when there are none."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe:
        return GpuProbe()
    try:
        proc = subprocess.run(
            [
                exe,
                "--query-gpu=name,memory.total,compute_cap,uuid,driver_version",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return GpuProbe()
    out = GpuProbe()
    for line in proc.stdout.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5:
            continue
        name, mem, cc, uuid, driver = cols[:5]
        out.gpus.append(
            {
                "name": name,
                "memory_mb": int(mem) if mem.isdigit() else None,
                "compute_capability": cc or None,
                "uuid": uuid or None,
            }
        )
        out.driver_version = driver or None
    return out


def gpu_available() -> bool:
    return bool(probe_gpus().gpus)
