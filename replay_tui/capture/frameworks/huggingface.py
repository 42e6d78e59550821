"""Hugging Face ``Trainer`` files: ``trainer_state.json``'s ``log_history`` (metric
histories by ``step``) and ``training_args.bin`` (the ``TrainingArguments``)."""

from __future__ import annotations

import json
import re
from typing import Any

from replay_tui.capture.frameworks import SKIPPED_KEYS, FileMetrics, finite

TIMING = re.compile(r"(_runtime|_per_second)$")
"""Keys of ``log_history`` that time the run (``train_runtime``...): they differ from run
to run by nature, so they are no metric to compare."""

INERT = frozenset({"transformers", "accelerate", "torch.device"})
"""The globals ``training_args.bin`` may name (read as records, never imported)."""

MAX_DEPTH = 8
SECRET = re.compile(r"token|secret|password|api_key", re.IGNORECASE)
"""Arguments that may hold a credential (``hub_token``): never recorded."""


def read_trainer_state(raw: bytes, rel: str) -> FileMetrics:
    """``log_history``: each entry's numbers at its ``step``.  The state's settings
    (``logging_steps``, ``max_steps``, ``train_batch_size``...) are not metrics."""
    from replay_tui.door import Refused

    kind = "Hugging Face trainer_state.json"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise Refused(f"{kind} {rel}: not JSON ({e})") from None
    history = data.get("log_history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        raise Refused(f"{kind} {rel}: no log_history list in it")
    out = FileMetrics()
    for entry in history:
        if not isinstance(entry, dict):
            continue
        step = entry.get("step")
        if type(step) is not int:
            continue
        for name, v in entry.items():
            if name in SKIPPED_KEYS or TIMING.search(name) or not isinstance(name, str):
                continue
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            out.add(name, step, float(v))
    return out


def read_training_args(raw: bytes, rel: str) -> dict[str, Any]:
    """The ``TrainingArguments`` the run was given, as plain values: read by the
    restricted unpickler of checkpoints (``replay_tui.checkpoints.unpickler``), which names a
    ``transformers`` or ``accelerate`` class without importing it and refuses any other
    global (``os.system``...).  Private fields (``_n_gpu``...) and values that are no
    plain value are left out."""
    from replay_tui.checkpoints.reader import read_pickled_record
    from replay_tui.checkpoints.unpickler import InertObject
    from replay_tui.door import Refused

    kind = "Hugging Face training_args.bin"
    try:
        obj = read_pickled_record(raw, INERT)
    except ValueError as e:
        raise Refused(f"{kind} {rel}: {e}") from None
    if not isinstance(obj, InertObject) or not isinstance(obj.state, dict):
        raise Refused(f"{kind} {rel}: not a pickled TrainingArguments")
    out: dict[str, Any] = {}
    for k, v in obj.state.items():
        if not isinstance(k, str) or k.startswith("_") or SECRET.search(k):
            continue
        plain = _plain(v, 0)
        if plain is not _DROP:
            out[k] = plain
    return out


_DROP = object()


def _plain(v: Any, depth: int) -> Any:
    from replay_tui.checkpoints.unpickler import InertObject

    if depth > MAX_DEPTH:
        return _DROP
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if finite(v) is not None else _DROP
    if isinstance(v, InertObject):
        # an enum (``IntervalStrategy('steps')``) or a device: its one plain argument
        if len(v.args) == 1 and isinstance(v.args[0], str | int) and v.state is None:
            return v.args[0]
        return _DROP
    if isinstance(v, list | tuple):
        items = [_plain(x, depth + 1) for x in v[:1000]]
        return [x for x in items if x is not _DROP]
    if isinstance(v, dict):
        d = {str(k): _plain(x, depth + 1) for k, x in list(v.items())[:1000] if isinstance(k, str)}
        return {k: x for k, x in d.items() if x is not _DROP}
    return _DROP
