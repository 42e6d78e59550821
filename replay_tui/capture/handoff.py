"""The SDK's handoff folder read back: the inside view the training code wrote,
read bounded through the door and validated part by part against the manifest's types."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from replay_tui.sdk import INSIDE_FILE

MAX_HANDOFF_BYTES = 64 * 1024 * 1024


def read_inside(handoff_dir: Path) -> dict[str, Any]:
    """The SDK's inside view, validated like any untrusted input.

    The handoff file is written by the training code, which in a replay came from a
    manifest.  It is read bounded (a regular file, not a link, at most 64 MiB), and each
    part that does not have the shape the manifest needs is dropped, not trusted: the run
    is kept, the dropped part shows as the gap it leaves (no seed, no metrics...), and
    the reasons are listed under ``"problems"``.
    """
    from replay_tui.door import Refused, exists_under, read_under

    if not exists_under(handoff_dir, INSIDE_FILE):
        return {}
    try:
        raw = read_under(handoff_dir, INSIDE_FILE, "handoff file", limit=MAX_HANDOFF_BYTES)
    except Refused as e:
        why = str(e)
        if "not a regular file" in why:
            why += ": ignored"
        elif "does not exist" not in why and "limit" not in why:
            why = f"handoff file {INSIDE_FILE}: cannot open it ({why})"
        return {"problems": [why]}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        return {"problems": [f"handoff file {INSIDE_FILE} is not JSON ({str(e)[:120]})"]}
    if not isinstance(data, dict):
        return {"problems": [f"handoff file {INSIDE_FILE} is not a JSON object: ignored"]}
    clean, problems = validate_inside(data)
    if problems:
        clean["problems"] = problems
    return clean


@functools.cache
def inside_checks() -> dict[str, Callable[[Any], Any]]:
    """One validator per part of the inside view, built from the manifest's own types
    (built once: record builds them while the command runs)."""
    from pydantic import TypeAdapter

    from storage import manifest as mf

    def model(cls: Any, keys: Sequence[str]) -> Callable[[Any], Any]:
        adapter = TypeAdapter(cls)

        def check(v: Any) -> Any:
            if not isinstance(v, dict) or set(v) - set(keys):
                raise ValueError(f"expected a map with keys among {', '.join(keys)}")
            adapter.validate_python(v, strict=True)
            return v

        return check

    def typed(tp: Any) -> Callable[[Any], Any]:
        adapter = TypeAdapter(tp)
        return lambda v: adapter.validate_python(v, strict=True)

    def config(v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError("expected a map")
        mf._check_config(v, "config")
        typed(dict[mf.Label, Any])(v)
        mf.config_hash(v)
        return v

    def history(v: Any) -> Any:
        typed(dict[mf.Label, list[tuple[mf.SafeInt, mf.Finite]]])(
            {k: [tuple(p) if isinstance(p, list) else p for p in pts] for k, pts in v.items()}
            if isinstance(v, dict) and all(isinstance(p, list) for p in v.values())
            else v
        )
        return v

    env_keys = (
        "python_version",
        "packages",
        "packages_sha256",
        "torch_version",
        "cuda_version",
        "cudnn_version",
        "nccl_version",
        "os",
    )
    return {
        "name": typed(mf.Label),
        "seed": typed(mf.Seed | None),
        "seeds": model(
            mf.RandomnessInfo, ("python", "numpy", "torch", "cuda", "dataloader_workers")
        ),
        "python_hash_seed": typed(mf.Label | None),
        "determinism": model(mf.DeterminismInfo, tuple(mf.DeterminismInfo.model_fields)),
        "nondeterministic_ops": typed(list[mf.Str]),
        "environment": model(mf.EnvironmentInfo, env_keys),
        "gpus": typed(list[mf.GpuInfo] | None),
        "warnings": typed(list[mf.LongStr]),
        "config": config,
        "metrics": typed(dict[mf.Label, mf.Finite]),
        "metric_history": history,
        "metric_times": typed(dict[mf.Label, list[mf.Finite]]),
        "metric_nonfinite": typed(dict[mf.Label, list[mf.SafeInt]]),
        "artifacts": typed(list[mf.Str]),
    }


def validate_inside(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Keep the parts of an inside view that are well formed; say why the others were not."""
    checks = inside_checks()
    clean: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        check = checks.get(key) if isinstance(key, str) else None
        if check is None:
            continue  # an SDK from another version may send more: ignored, as before
        try:
            check(value)
        except Exception as e:  # pydantic, ManifestError, ValueError: all mean "not this"
            first = str(e).splitlines()
            why = (first[1] if len(first) > 1 else first[0]).strip()[:160] if first else ""
            problems.append(f"handoff file: {key} is malformed ({why}): ignored")
            continue
        clean[key] = value
    return clean, problems
