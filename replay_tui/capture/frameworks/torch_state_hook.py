"""The ``sitecustomize`` a local run starts with (copied, as text, into the run's handoff
folder by :mod:`replay_tui.capture.frameworks.observe`, which puts that folder first on
``PYTHONPATH``): at each Python process's end, torch's determinism switches as the
program left them, written to one small JSON file per process.

It runs inside the user's program, in whatever Python that is: it imports nothing of
replay_tui, never imports torch (a process that did not import torch writes nothing),
never prints, and swallows its own errors.  It takes itself off ``sys.path`` at once,
and then runs the ``sitecustomize`` it shadows, if any, as Python would have.  A
DataLoader worker writes nothing (its switches are its parent's); a process ended by a
signal or ``os._exit`` writes nothing (an absence, never a guess)."""

from __future__ import annotations

import atexit
import os
import sys

OBSERVE_ENV = "REPLAY_TUI_OBSERVE"
LAUNCHERS = ("torchrun", "accelerate", "deepspeed")
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher.runner",
)
_HERE = os.path.dirname(os.path.abspath(__file__))
_FOLDER = os.environ.get(OBSERVE_ENV, "")
_PPID = os.getppid()


def _launcher() -> bool:
    """Whether this process is a distributed launcher's own (it starts the training
    processes; its torch switches are not theirs)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) in LAUNCHER_MODULES:
        return True
    return bool(sys.argv) and os.path.basename(sys.argv[0] or "") in LAUNCHERS


def _observe() -> None:
    try:
        torch = sys.modules.get("torch")
        if torch is None or not _FOLDER:
            return
        data_mod = sys.modules.get("torch.utils.data")
        if data_mod is not None and data_mod.get_worker_info() is not None:
            return
        import json

        cudnn = torch.backends.cudnn
        seen = {
            "pid": os.getpid(),
            "ppid": _PPID,
            "launcher": _launcher(),
            "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
            "warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
            "cudnn_deterministic": bool(cudnn.deterministic),
            "cudnn_benchmark": bool(cudnn.benchmark),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        }
        path = os.path.join(_FOLDER, f"{os.getpid()}.json")
        with open(path, "x", encoding="utf-8") as fh:
            json.dump(seen, fh)
    except BaseException:  # never the program's failure
        return


def _chain() -> None:
    """Take this folder off ``sys.path`` and run the ``sitecustomize`` it shadows."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors are reported as Python reports them


if __name__ == "sitecustomize":  # as Python's start runs it, never when imported
    if _FOLDER:
        atexit.register(_observe)
    _chain()
