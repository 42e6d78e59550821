"""The manifest built from its parts: what was learnt before the run (``Outside``),
what the command did (``ExecResult``), the SDK's inside view, the hashed outputs, the
metrics and what the frameworks wrote; sealed, not yet stored."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from replay_tui.capture import probes
from replay_tui.capture.argv_config import ArgvConfig, merge_config
from replay_tui.capture.metrics import MetricSeries
from replay_tui.sdk import determinism_group, randomness_group

if TYPE_CHECKING:
    from replay_tui.capture.executor import ExecResult
    from replay_tui.capture.frameworks import Findings
    from replay_tui.capture.outside import Outside
    from storage.manifest import RunManifest


def build_manifest(
    *,
    run_id: str,
    name: str,
    argv: Sequence[str],
    tags: Mapping[str, str],
    outside: Outside,
    result: ExecResult,
    inside: Mapping[str, Any],
    artifacts: list[dict[str, Any]],
    metrics: MetricSeries,
    log_sha256: str | None,
    log_tail: str,
    seed: int | None,
    image: Mapping[str, Any] | None,
    diff_sha256: str | None,
    kind: str = "original",
    replay_of: str | None = None,
    replay: Mapping[str, Any] | None = None,
    capture: Mapping[str, Any] | None = None,
    argv_config: ArgvConfig | None = None,
    frameworks: Findings | None = None,
    interpreter: str | None = None,
) -> RunManifest:
    from replay_tui.capture.frameworks import apply_findings
    from replay_tui.capture.interpreter import interpreter_info
    from storage.manifest import manifest_from_data

    g = outside.git
    seeds = dict(inside.get("seeds") or {})
    det = dict(inside.get("determinism") or {})
    ienv = dict(inside.get("environment") or {})
    env_view = {**ienv, **result.environment}
    # torch, CUDA, cuDNN, NCCL: the SDK's view where it saw torch in the run (all four as
    # the run saw them), else what the run's installed torch says (read before the run)
    torch_view: Mapping[str, Any] = (
        env_view if env_view.get("torch_version") else outside.python.torch_versions()
    )
    gpus = inside.get("gpus")
    if gpus is None and outside.gpus.gpus:
        gpus = outside.gpus.gpus
    if gpus is not None and outside.gpus.gpus:  # prefer nvidia-smi detail (uuid)
        gpus = outside.gpus.gpus
    sdk_metrics = MetricSeries()
    sdk_times = inside.get("metric_times") or {}
    for n, pts in (inside.get("metric_history") or {}).items():
        times = sdk_times.get(n)
        if not isinstance(times, list) or len(times) != len(pts):
            times = [None] * len(pts)  # the SDK's times must match its points one for one
        for (s, v), t in zip(pts, times, strict=True):
            sdk_metrics.add(str(n), int(s), float(v), None if t is None else float(t))
    for n, steps in (inside.get("metric_nonfinite") or {}).items():
        sdk_metrics.nonfinite[str(n)] = [int(x) for x in steps][:1000]
    for n, v in (inside.get("metrics") or {}).items():
        sdk_metrics.set_final(str(n), float(v))
    sdk_metrics.merge(metrics)
    config, config_source = merge_config(dict(inside.get("config") or {}), argv_config)
    data: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "name": name or str(inside.get("name") or ""),
        "kind": kind,
        "replay_of": replay_of,
        "status": result.status,
        "exit_code": result.exit_code,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
        "duration_s": round(result.duration_s, 6),
        "tags": dict(tags),
        "argv": list(argv),
        "workdir": g.workdir,
        "env": outside.env,
        "code": {
            "repo_url": g.repo_url,
            "commit": g.commit,
            "branch": g.branch,
            "dirty": g.dirty,
            "diff_sha256": diff_sha256,
            "untracked": g.untracked,
        },
        "image": dict(image) if image else None,
        "data": outside.data,
        "config": config,
        "config_source": config_source,
        "randomness": randomness_group(
            inside["seed"] if inside.get("seed") is not None else seed,
            seeds,
            outside.env.get("PYTHONHASHSEED"),
        ),
        "determinism": determinism_group(det, inside.get("nondeterministic_ops")),
        "environment": {
            "python_version": env_view.get("python_version") or outside.python.python_version,
            "packages": env_view.get("packages", outside.python.packages),
            "packages_sha256": env_view.get("packages_sha256", outside.python.packages_sha256),
            "torch_version": torch_view.get("torch_version"),
            "cuda_version": torch_view.get("cuda_version"),
            "cudnn_version": torch_view.get("cudnn_version"),
            "nccl_version": torch_view.get("nccl_version"),
            "os": env_view.get("os") or probes.os_description(),
            "kernel": probes.kernel(),
            "hostname": probes.hostname(),
            "interpreter": interpreter_info(
                interpreter, env_view.get("python_version") or outside.python.python_version
            ),
        },
        "hardware": {
            "cpu_model": probes.cpu_model(),
            "cpu_count": os.cpu_count(),
            "gpus": gpus if gpus is not None else [],
            "gpu_count": len(gpus) if gpus is not None else 0,
            "driver_version": outside.gpus.driver_version,
        },
        "outputs": {
            "artifacts": artifacts,
            "metrics": sdk_metrics.finals,
            "metric_history": {k: [list(p) for p in v] for k, v in sdk_metrics.history.items()},
            "metric_times": sdk_metrics.timed(),
            "metric_nonfinite": sdk_metrics.nonfinite,
            "log_sha256": log_sha256,
            "log_tail": log_tail or None,
        },
        "capture": dict(capture) if capture else None,
        "replay": dict(replay) if replay else None,
        "launch": probes.launch_info(argv),
    }
    if frameworks is not None:
        apply_findings(data, frameworks, sdk_metrics, inside, seed, result.started_at)
        config = data["config"]
    if config:
        from storage.manifest import config_hash

        try:
            data["config_hash"] = config_hash(config)
        except Exception:
            data["config"] = {}
    return manifest_from_data(data, source="launcher").sealed()
