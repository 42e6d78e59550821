"""The SDK that training code calls: seed everything, switch on deterministic mode, log.

Standard library only at import time; numpy and torch are touched only when they are
already importable and the caller asks for them.  The module is also mounted read-only
into replay containers, so it must not import anything else from this project.

Under the launcher (``replay-tui record``) the SDK hands its inside view (seeds, flags,
torch/CUDA/cuDNN/NCCL versions, GPUs, config, metrics, nondeterministic ops) to the
launcher through the folder named by ``REPLAY_TUI_HANDOFF``.  Standalone, ``Run.finish``
writes a complete manifest JSON that ``replay-tui ingest`` accepts.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import re
import secrets
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

HANDOFF_ENV = "REPLAY_TUI_HANDOFF"
SEED_ENV = "REPLAY_TUI_SEED"
DETERMINISM_ENV = "REPLAY_TUI_DETERMINISM"  # "on" / "off": the launcher's override
OUTPUT_ENV = "REPLAY_TUI_OUTPUT"
INSIDE_FILE = "inside.json"
CUBLAS_DEFAULT = ":4096:8"
INDUCTOR_ENV = "TORCHINDUCTOR_DETERMINISTIC"  # read once, when torch's compiler config loads
INDUCTOR_CONFIG = "torch._inductor.config"

_state: dict[str, Any] = {
    "seed": None,
    "seeds": {},
    "determinism": {},
    "nondeterministic_ops": [],
    "warnings": [],
    "inductor_env_set": False,
}
_current: Run | None = None
_NONDET = re.compile(r"^(\S+) does not have a deterministic implementation")


def _warn(message: str) -> None:
    _state["warnings"].append(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


# -- seeds ----------------------------------------------------------------------------


def seed_everything(seed: int | None = None) -> int:
    """Seed Python, NumPy, torch and every CUDA device; record each source's seed.

    ``REPLAY_TUI_SEED`` (set by the launcher's ``--seed`` and by replays) wins over the
    argument so a replay reruns with the recorded seed.  Returns the seed used.
    """
    env_seed = os.environ.get(SEED_ENV)
    if env_seed:
        seed = int(env_seed)
    if seed is None:
        raise ValueError("seed_everything needs a seed (or REPLAY_TUI_SEED in the environment)")
    if not 0 <= seed < 2**32:
        raise ValueError("seed must be in [0, 2**32)")
    seeds: dict[str, int] = {}
    random.seed(seed)
    seeds["python"] = seed
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed)
        seeds["numpy"] = seed
    torch = _torch()
    if torch is not None:
        torch.manual_seed(seed)  # also seeds every CUDA device, lazily
        seeds["torch"] = seed
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
            seeds["cuda"] = seed
        seeds["dataloader_workers"] = seed
    _state["seed"] = seed
    _state["seeds"] = seeds
    if "PYTHONHASHSEED" not in os.environ:
        _warn(
            "PYTHONHASHSEED is unset: set and dict order may vary between runs"
            " (export PYTHONHASHSEED=0 before Python starts)"
        )
    _save_handoff()
    return seed


def worker_init_fn(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: seed Python and NumPy in each worker from torch's seed."""
    torch = _torch()
    base = torch.initial_seed() if torch is not None else (_state["seed"] or 0) + worker_id
    worker_seed = base % 2**32
    random.seed(worker_seed)
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(worker_seed)


def dataloader_generator(seed: int | None = None) -> Any:
    """A ``torch.Generator`` for a DataLoader's shuffling, seeded from the run's seed."""
    torch = _torch()
    if torch is None:
        raise RuntimeError("dataloader_generator needs torch")
    g = torch.Generator()
    chosen = seed if seed is not None else _state["seed"]
    if chosen is None:
        raise RuntimeError("call seed_everything() first or pass a seed")
    g.manual_seed(int(chosen))
    return g


# -- determinism ----------------------------------------------------------------------


def _catch_nondeterministic(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    m = _NONDET.search(str(message))
    if m:
        op = m.group(1)
        if op not in _state["nondeterministic_ops"]:
            _state["nondeterministic_ops"].append(op)
            _save_handoff()
    _previous_showwarning(message, category, filename, lineno, file, line)


_previous_showwarning = warnings.showwarning


DETERMINISM_FLAGS = (
    "deterministic_algorithms",
    "cudnn_deterministic",
    "cudnn_benchmark",
    "cublas_workspace_config",
    "allow_tf32",
    "mixed_precision",
)
SEED_KINDS = ("python", "numpy", "torch", "cuda", "dataloader_workers")


def determinism_group(flags: dict[str, Any], nondeterministic_ops: Any) -> dict[str, Any]:
    """The manifest's ``determinism`` group from what the SDK recorded.  The launcher and
    the standalone manifest both build it here, so they cannot drift apart."""
    return {
        **{k: flags.get(k) for k in DETERMINISM_FLAGS},
        "nondeterministic_ops": list(nondeterministic_ops or []),
    }


def randomness_group(seed: Any, seeds: dict[str, Any], python_hash_seed: Any) -> dict[str, Any]:
    """The manifest's ``randomness`` group (shared like :func:`determinism_group`)."""
    return {
        "seed": seed,
        **{k: seeds.get(k) for k in SEED_KINDS},
        "python_hash_seed": python_hash_seed,
    }


def mixed_precision(mode: str | None) -> None:
    """Record the mixed-precision mode the run trains in: ``"bf16"``, ``"fp16"``,
    ``"tf32"``..., or ``None`` for full precision.  It changes the numbers a run
    produces, so a replay and a comparison need to know it."""
    if mode is not None and (not isinstance(mode, str) or not 0 < len(mode) <= 64):
        raise ValueError("mixed_precision(mode): mode is a short name such as 'bf16', or None")
    _state["determinism"] = {**_state["determinism"], "mixed_precision": mode}
    _save_handoff()


def _use_deterministic_algorithms(torch: Any, on: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(on, warn_only=...)``, without the import of
    torch's compiler where that import is not needed.

    torch sets two things: its deterministic flag, and ``torch._inductor.config
    .deterministic``, which it imports to do so; that import loads the compiler (2.4 s
    of a CPU run's 7 s, measured with torch 2.13).  The config reads its flag from
    ``TORCHINDUCTOR_DETERMINISTIC`` when it is first imported, so until then the flag
    is set through that variable: unchanged when it already says ``on``, set to "1" for
    on (as ``CUBLAS_WORKSPACE_CONFIG`` is, so a child process inherits both), and taken
    back for off only where this module set it.  Anything else (the config already
    loaded, a variable set by someone else, a torch without the private setter) goes
    through torch's own function, import and all."""
    setter = getattr(getattr(torch, "_C", None), "_set_deterministic_algorithms", None)
    if INDUCTOR_CONFIG in sys.modules or setter is None:
        torch.use_deterministic_algorithms(on, warn_only=warn_only)
        return
    if (os.environ.get(INDUCTOR_ENV) == "1") != on:
        if on:
            os.environ[INDUCTOR_ENV] = "1"
            _state["inductor_env_set"] = True
        elif _state["inductor_env_set"]:
            del os.environ[INDUCTOR_ENV]
            _state["inductor_env_set"] = False
        else:
            torch.use_deterministic_algorithms(on, warn_only=warn_only)
            return
    setter(on, warn_only=warn_only)


def deterministic(on: bool = True, *, warn_only: bool = True) -> dict[str, Any]:
    """Switch deterministic mode on (or off) and record every flag as set.

    On: ``torch.use_deterministic_algorithms(True, warn_only=...)``, cuDNN deterministic
    and not benchmarking, ``CUBLAS_WORKSPACE_CONFIG``, TF32 off.  Nondeterministic ops
    that run are recorded by name (warn-only mode lets the run finish).
    ``REPLAY_TUI_DETERMINISM=off|on`` overrides ``on`` (used to measure its cost).
    """
    global _previous_showwarning
    override = os.environ.get(DETERMINISM_ENV, "").lower()
    if override in ("on", "off"):
        on = override == "on"
    torch = _torch()
    flags: dict[str, Any] = {}
    if on:
        if "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DEFAULT
            if torch is not None and torch.cuda.is_initialized():
                _warn(
                    "CUDA was initialised before deterministic(): CUBLAS_WORKSPACE_CONFIG"
                    " cannot take effect in this process; call deterministic() first"
                )
        flags["cublas_workspace_config"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
    else:
        flags["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if torch is not None:
        _use_deterministic_algorithms(torch, on, warn_only)
        torch.backends.cudnn.deterministic = on
        torch.backends.cudnn.benchmark = False if on else torch.backends.cudnn.benchmark
        if on:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        flags.update(
            deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
            cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
            allow_tf32=bool(
                torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32
            ),
        )
    else:
        flags["deterministic_algorithms"] = None
    if on and warnings.showwarning is not _catch_nondeterministic:
        _previous_showwarning = warnings.showwarning
        warnings.showwarning = _catch_nondeterministic
        warnings.filterwarnings("always", message=r".*does not have a deterministic implementation")
    if "mixed_precision" in _state["determinism"]:  # recorded before: keep it
        flags["mixed_precision"] = _state["determinism"]["mixed_precision"]
    _state["determinism"] = flags
    _save_handoff()
    return dict(flags)


# -- the inside view ------------------------------------------------------------------


def _environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python_version": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch_version"] = str(torch.__version__)
        env["cuda_version"] = torch.version.cuda
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        env["cudnn_version"] = str(cudnn) if cudnn else None
        nccl = None
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        env["nccl_version"] = nccl
    return env


def _gpus() -> list[dict[str, Any]] | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "name": p.name,
                "memory_mb": int(p.total_memory // (1024 * 1024)),
                "compute_capability": f"{p.major}.{p.minor}",
            }
        )
    return out


def inside_view() -> dict[str, Any]:
    run = _current
    view: dict[str, Any] = {
        "seed": _state["seed"],
        "seeds": dict(_state["seeds"]),
        "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
        "determinism": dict(_state["determinism"]),
        "nondeterministic_ops": list(_state["nondeterministic_ops"]),
        "environment": _environment(),
        "gpus": _gpus(),
        "warnings": list(_state["warnings"]),
    }
    if run is not None:
        view.update(run._view())
    return view


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _save_handoff() -> None:
    folder = os.environ.get(HANDOFF_ENV)
    if not folder:
        return
    with contextlib.suppress(OSError):
        _atomic_write(Path(folder) / INSIDE_FILE, json.dumps(inside_view(), default=str))


# -- the run object -------------------------------------------------------------------


def uuid7() -> str:
    ms = int(time.time() * 1000)
    rand = secrets.randbits(74)
    n = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _utc(ts: float) -> str:
    t = time.gmtime(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int((ts % 1) * 1000):03d}Z"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Run:
    """A training run as seen from inside: config, metrics and artifacts."""

    def __init__(self, name: str = "", config: dict[str, Any] | None = None) -> None:
        self.name = name
        self.run_id = uuid7()
        self.started = time.time()
        self.config: dict[str, Any] = dict(config or {})
        self.metrics: dict[str, float] = {}
        self.history: dict[str, list[list[float]]] = {}
        self.times: dict[str, list[float]] = {}  # per point: seconds since the start
        self.nonfinite: dict[str, list[int]] = {}  # steps where a metric was NaN/inf
        self.artifacts: list[str] = []
        self.finished = False
        self._last_flush = 0.0

    def log_config(self, config: dict[str, Any]) -> None:
        """Record hyperparameters (all of them, not only the changed ones)."""
        self.config.update(config)
        _save_handoff()

    def log_metric(self, name: str, value: float, step: int) -> None:
        value = float(value)
        if not math.isfinite(value):
            _warn(f"metric {name} at step {step} is {value}: recorded as non-finite")
            steps = self.nonfinite.setdefault(name, [])
            if len(steps) < 1000:
                steps.append(int(step))
            return
        self.metrics[name] = value
        self.history.setdefault(name, []).append([int(step), value])
        self.times.setdefault(name, []).append(round(max(0.0, time.time() - self.started), 3))
        now = time.monotonic()
        if now - self._last_flush > 2.0:
            self._last_flush = now
            _save_handoff()

    def log_artifact(self, path: str | os.PathLike[str]) -> None:
        p = os.fspath(path)
        if p not in self.artifacts:
            self.artifacts.append(p)
        _save_handoff()

    def _view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config,
            "metrics": self.metrics,
            "metric_history": self.history,
            "metric_times": self.times,
            "metric_nonfinite": self.nonfinite,
            "artifacts": self.artifacts,
        }

    def finish(self, status: str = "succeeded", manifest_path: str | None = None) -> Path | None:
        """End the run.  Standalone, writes a manifest JSON and returns its path."""
        if self.finished:
            return None
        self.finished = True
        _save_handoff()
        if os.environ.get(HANDOFF_ENV):
            return None
        out = Path(manifest_path or Path("runs") / f"{self.run_id}.json")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(out, json.dumps(self.standalone_manifest(status), indent=2))
        except OSError as e:  # a read-only checkout must not turn a good run into a crash
            _warn(f"could not write the run manifest to {out}: {e.strerror}")
            return None
        return out

    def standalone_manifest(self, status: str) -> dict[str, Any]:
        """A complete manifest from inside the process (no launcher)."""
        view = inside_view()
        ended = time.time()
        code = _git_state()
        artifacts = []
        for a in self.artifacts:
            p = Path(a)
            if p.is_file():
                rel = os.path.relpath(p.resolve(), Path.cwd()).replace(os.sep, "/")
                artifacts.append(
                    {
                        "path": os.path.normpath(rel).replace(os.sep, "/"),
                        "sha256": _sha256_file(p),
                        "size_bytes": p.stat().st_size,
                        "kind": "checkpoint"
                        if p.suffix in (".pt", ".pth", ".ckpt", ".safetensors")
                        else "file",
                    }
                )
        det = view["determinism"]
        seeds = view["seeds"]
        gpus = view["gpus"]
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            in (
                "PYTHONHASHSEED",
                "CUBLAS_WORKSPACE_CONFIG",
                "CUDA_VISIBLE_DEVICES",
                "OMP_NUM_THREADS",
            )
        }
        return {
            "schema_version": 1,
            "run_id": self.run_id,
            "name": self.name,
            "kind": "original",
            "status": status,
            "exit_code": 0 if status == "succeeded" else 1,
            "started_at": _utc(self.started),
            "ended_at": _utc(ended),
            "duration_s": round(ended - self.started, 6),
            "argv": [sys.executable.rsplit("/", 1)[-1], *sys.argv],
            "workdir": code.pop("workdir", "."),
            "env": env,
            "code": code,
            "config": self.config,
            "randomness": randomness_group(view["seed"], seeds, view["python_hash_seed"]),
            "determinism": determinism_group(det, view["nondeterministic_ops"]),
            "environment": {
                **{k: v for k, v in view["environment"].items()},
                "os": platform.platform(),
                "kernel": platform.release(),
                "hostname": platform.node(),
            },
            "hardware": {
                "cpu_count": os.cpu_count(),
                "gpus": gpus,
                "gpu_count": None if gpus is None else len(gpus),
            },
            "outputs": {
                "artifacts": artifacts,
                "metrics": self.metrics,
                "metric_history": self.history,
                "metric_times": self.times,
                "metric_nonfinite": self.nonfinite,
            },
        }

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is KeyboardInterrupt:
            self.finish("interrupted")
        else:
            self.finish("failed" if exc_type else "succeeded")


def _git_state() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", *args], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {}
    root = git("rev-parse", "--show-toplevel") or "."
    status = git("status", "--porcelain", "--untracked-files=no")
    branch = git("symbolic-ref", "--short", "-q", "HEAD")
    workdir = os.path.relpath(Path.cwd().resolve(), Path(root).resolve()).replace(os.sep, "/")
    return {
        "commit": commit,
        "branch": branch or None,
        # Standalone, the diff is not stored: the launcher does that (a gap says so).
        "dirty": bool(status) if status is not None else None,
        "workdir": workdir,
    }


def start_run(name: str = "", config: dict[str, Any] | None = None) -> Run:
    """Begin the run (one per process); finished automatically at exit."""
    global _current
    if _current is None or _current.finished:
        _current = Run(name, config)
        atexit.register(_at_exit)
    elif config:
        _current.log_config(config)
    _save_handoff()
    return _current


def current_run() -> Run | None:
    return _current


def _at_exit() -> None:
    if _current is not None and not _current.finished:
        _current.finish("succeeded")
