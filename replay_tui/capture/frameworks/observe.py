"""torch's determinism switches as the program itself left them, seen from inside a local
run without the SDK: a plain Lightning script's ``Trainer(deterministic=True)``, a
``torch.use_deterministic_algorithms(True)`` in a ``torchrun`` program.

:func:`install` copies :mod:`~replay_tui.capture.frameworks.torch_state_hook` into the
run's handoff folder as ``sitecustomize.py`` and puts that folder first on the command's
``PYTHONPATH`` (its own ``PYTHONPATH`` after it; the hook takes itself off ``sys.path`` and
runs the ``sitecustomize`` it shadows).  Every Python process of the run that imported
torch writes, at its end, what ``torch.are_deterministic_algorithms_enabled()``, the cuDNN
flags and ``CUBLAS_WORKSPACE_CONFIG`` (which Lightning sets) said.  :func:`read` reads
those files through the door (the run wrote them: untrusted, each bounded, their shape
checked) and says what the run's *training* processes agree on: a launcher's own process
(``torchrun``, ``accelerate launch``) is left out, and where the rest disagree, a process
that only started others (``torch.multiprocessing.spawn``'s parent) is left out too; a
switch they still disagree on stays unknown.

Only the local executor installs it (record without ``--image``, a local replay): a
container or a Slurm job runs without it, and its manifest says only what the SDK and the
framework files say."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OBSERVE_ENV = "REPLAY_TUI_OBSERVE"
"""The folder the hook writes into (the same name as the hook's own constant)."""
HOOK_FOLDER = "torch-state-hook"
OBSERVED_FOLDER = "torch-state"
MAX_FILES = 256
"""The most processes' files read (a run with more leaves the switches unknown)."""
MAX_FILE_BYTES = 4096
SWITCHES = (
    "deterministic_algorithms",
    "cudnn_deterministic",
    "cudnn_benchmark",
    "cublas_workspace_config",
)
"""The manifest's ``determinism`` fields the hook observes."""
SOURCE = "observed: torch's own state at the end of the run's training processes"
"""``determinism.source`` for switches seen this way."""


def install(handoff: Path, env: dict[str, str]) -> None:
    """Make the command started with ``env`` write torch's state into ``handoff``."""
    hook = handoff / HOOK_FOLDER
    observed = handoff / OBSERVED_FOLDER
    hook.mkdir(exist_ok=True)
    observed.mkdir(exist_ok=True)
    source = Path(__file__).with_name("torch_state_hook.py").read_bytes()
    (hook / "sitecustomize.py").write_bytes(source)
    before = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(hook) + (f":{before}" if before else "")
    env[OBSERVE_ENV] = str(observed)


@dataclass
class Observed:
    """What the run's training processes agreed on (None: unknown or they disagreed)."""

    switches: dict[str, Any]
    processes: int


def read(handoff: Path) -> tuple[Observed | None, list[str]]:
    """The switches the run's processes left (None where none wrote any) and what was
    refused, with why."""
    from replay_tui.door import Refused, glob_under, read_under

    if not (handoff / OBSERVED_FOLDER).is_dir():
        return None, []
    refused: list[str] = []
    seen: list[dict[str, Any]] = []
    found = glob_under(handoff, (OBSERVED_FOLDER, "*"))
    if len(found) > MAX_FILES:
        return None, [f"torch state files: {len(found)}, more than {MAX_FILES}: not read"]
    for m in found:
        if m.what != "file":
            refused.append(f"torch state file {m.rel}: a {m.what}, not a regular file: not read")
    found = [m for m in found if m.what == "file"]
    for m in sorted(found, key=lambda m: m.rel):
        try:
            raw = read_under(handoff, m.rel, "torch state file", limit=MAX_FILE_BYTES)
            got = _checked(json.loads(raw))
        except Refused as e:
            refused.append(str(e))
            continue
        except (ValueError, RecursionError) as e:
            refused.append(f"torch state file {m.rel}: not its shape ({str(e)[:120]})")
            continue
        seen.append(got)
    training = [s for s in seen if not s["launcher"]]
    if not training:
        return None, refused
    switches = _agreed(training)
    if any(v is None for v in switches.values()):
        parents = {s["ppid"] for s in training}
        leaves = [s for s in training if s["pid"] not in parents]
        if leaves and len(leaves) < len(training):
            training = leaves
            switches = _agreed(training)
    return Observed(switches, len(training)), refused


def _agreed(seen: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in SWITCHES:
        values = {s[k] for s in seen}
        out[k] = values.pop() if len(values) == 1 else None
    return out


def _checked(data: Any) -> dict[str, Any]:
    """One process's file, or ValueError saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for k in ("pid", "ppid"):
        if type(data.get(k)) is not int or not 0 <= data[k] < 1 << 32:
            raise ValueError(f"{k} is not a process id")
    for k in ("launcher", "warn_only", *SWITCHES[:3]):
        if type(data.get(k)) is not bool:
            raise ValueError(f"{k} is not true or false")
    ws = data.get("cublas_workspace_config")
    if ws is not None and (
        not isinstance(ws, str) or len(ws) > 64 or not ws.isprintable() or not ws
    ):
        raise ValueError("cublas_workspace_config is not a short printable text")
    return {k: data[k] for k in ("pid", "ppid", "launcher", "warn_only", *SWITCHES)}
