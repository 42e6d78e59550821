"""Replay a recorded run, stage by stage, and store what happened.

Stages: plan, checkout, verify (data hashes), pull (image by digest), run, hash, compare.
Every stage reports through ``on_event``; ``should_cancel`` stops the run.  A replay
that fails after planning is still stored as a replay fact with its reason, so the
ledger says what was tried and why it did not work.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.capture import probes
from replay_tui.capture.hashing import StatCache, hash_path
from replay_tui.capture.launcher import (
    ExecResult,
    ExecSpec,
    Executor,
    LocalExecutor,
    Outside,
    artifact_entries,
    build_manifest,
    keep_artifacts,
    keep_log,
    read_inside,
)
from replay_tui.capture.metrics import MetricRegex, MetricSeries, read_metrics_file
from replay_tui.errors import BadInput, InfraError, ReplayTuiError
from replay_tui.replay.checkout import Worktree, find_repo, make_worktree
from replay_tui.replay.plan import ReplayOptions, ReplayPlan, make_plan
from replay_tui.sdk import HANDOFF_ENV, _uuid7
from storage.manifest import RunManifest, sha256_hex
from storage.objects import ObjectStore
from storage.store import Location, RunStore

STAGES = ("plan", "checkout", "verify", "pull", "run", "hash", "compare")


@dataclass(frozen=True)
class ReplayEvent:
    stage: str
    state: str  # start / done / failed / log / note
    message: str = ""


OnEvent = Callable[[ReplayEvent], None]


@dataclass
class ReplayOutcome:
    original: RunManifest
    replay: RunManifest | None
    verdict: str | None
    comparison: dict[str, Any] | None
    exit_code: int
    reason: str | None
    replay_fact_id: int | None
    duration_s: float


def _noop(_: ReplayEvent) -> None:
    pass


def replay_run(
    store: RunStore,
    run_ref: str,
    options: ReplayOptions,
    *,
    on_event: OnEvent = _noop,
    should_cancel: Callable[[], bool] = lambda: False,
    docker_client: Any = None,
) -> ReplayOutcome:
    """Replay one run and store the replay manifest, the comparison and a replay fact."""
    t0 = time.monotonic()
    stage = "plan"
    on_event(ReplayEvent(stage, "start"))
    original_id = store.resolve(run_ref)
    original = store.manifest(original_id)
    locations = store.locations(original_id)
    data_locs = {loc.name: loc.host_path for loc in locations if loc.role == "data"}
    repo_loc = next((Path(loc.host_path) for loc in locations if loc.role == "repo"), None)
    host_gpu = (
        probes.gpu_available() if (original.hardware.gpus or options.gpus == "all") else False
    )
    plan = make_plan(original, options, data_locations=data_locs, host_has_gpu=host_gpu)
    on_event(
        ReplayEvent(
            stage,
            "done",
            f"{options.backend} backend, image {plan.image or '(host)'}, commit {plan.commit[:12]}"
            + (", CPU fallback" if plan.cpu_fallback else ""),
        )
    )
    holder: list[Worktree] = []
    tmp = Path(tempfile.mkdtemp(prefix="replay-tui-replay-"))
    try:
        try:
            return _replay_stages(
                store,
                plan,
                tmp,
                repo_loc,
                on_event,
                should_cancel,
                docker_client,
                t0,
                set_worktree=holder.append,
            )
        except KeyboardInterrupt:
            store.add_replay(
                original_id,
                replay_run=None,
                backend=options.backend,
                status="interrupted",
                verdict=None,
                reason="interrupted before the replay finished (Ctrl-C)",
                duration_s=time.monotonic() - t0,
                comparison_id=None,
                body={"reason": "interrupted"},
            )
            raise
        except ReplayTuiError as e:
            reason = e.message
            fid = store.add_replay(
                original_id,
                replay_run=None,
                backend=options.backend,
                status="error",
                verdict=None,
                reason=reason,
                duration_s=time.monotonic() - t0,
                comparison_id=None,
                body={"reason": reason, "hint": e.hint, "exit_code": e.exit_code},
            )
            on_event(ReplayEvent("replay", "failed", reason))
            e.fact_id = fid  # type: ignore[attr-defined]
            raise
    finally:
        for wt in holder:
            if options.keep_workdir:
                on_event(ReplayEvent("run", "note", f"worktree kept at {wt.path}"))
            else:
                wt.remove()
        shutil.rmtree(tmp, ignore_errors=True)


def _replay_stages(
    store: RunStore,
    plan: ReplayPlan,
    tmp: Path,
    repo_loc: Path | None,
    on_event: OnEvent,
    should_cancel: Callable[[], bool],
    docker_client: Any,
    t0: float,
    set_worktree: Callable[[Worktree], None],
) -> ReplayOutcome:
    m = plan.original
    opts = plan.options
    # -- checkout
    on_event(ReplayEvent("checkout", "start", f"commit {plan.commit}"))
    repo = find_repo(
        plan.commit,
        explicit=opts.repo,
        recorded=repo_loc,
        repo_url=m.code.repo_url,
        cache_dir=store.path.parent / "repos",
    )
    diff = None
    if m.code.dirty and m.code.diff_sha256:
        diff = store.get_blob(m.code.diff_sha256)
        if diff is None:
            raise InfraError(f"the stored diff {m.code.diff_sha256[:12]} is missing from the store")
    wt = make_worktree(repo, plan.commit, diff)
    set_worktree(wt)
    on_event(
        ReplayEvent(
            "checkout",
            "done",
            f"worktree {wt.path}" + (" with the stored diff applied" if wt.diff_applied else ""),
        )
    )
    # -- verify data
    on_event(ReplayEvent("verify", "start", f"{len(plan.data)} data input(s)"))
    with StatCache(store.path.parent / "hashcache.db") as cache:
        forced = False
        verified: list[dict[str, Any]] = []
        for dm in plan.data:
            d = dm.info
            problem = None
            digest = None
            if dm.host_path is None:
                problem = f"data {d.name!r} ({d.path}): this host has no record of where it lives"
            elif not dm.host_path.exists():
                problem = f"data {d.name!r}: {dm.host_path} is missing"
            else:
                try:
                    digest = hash_path(dm.host_path, cache=cache)
                except (ValueError, OSError, RuntimeError) as e:
                    raise InfraError(f"data {d.name!r}: cannot hash {dm.host_path}: {e}") from None
                if digest.sha256 != d.sha256:
                    problem = (
                        f"data {d.name!r}: {dm.host_path} has changed (sha256 {digest.sha256[:12]},"
                        f" recorded {str(d.sha256)[:12]})"
                    )
            if problem:
                if not opts.force_data:
                    raise InfraError(problem, "restore the recorded data, or --force-data (a gap)")
                forced = True
                on_event(ReplayEvent("verify", "note", problem + " (--force-data: going on)"))
            entry = d.model_dump(mode="json")
            if digest is not None:
                entry.update(
                    sha256=digest.sha256, size_bytes=digest.size_bytes, file_count=digest.file_count
                )
            verified.append(entry)
    on_event(ReplayEvent("verify", "done", "data forced" if forced else "every data hash matches"))
    # -- place data and outputs in the worktree
    cwd = (wt.path / plan.workdir).resolve()
    if not cwd.is_relative_to(wt.path.resolve()):
        raise BadInput(f"workdir {plan.workdir!r} escapes the repository")
    cwd.mkdir(parents=True, exist_ok=True)
    for dm in plan.data:
        if dm.host_path is None or not dm.host_path.exists():
            continue
        if repo_loc is not None and dm.host_path.is_relative_to(repo_loc):
            target = wt.path / dm.info.path
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(dm.host_path)
    for out_dir in plan.output_dirs:
        out = cwd / out_dir
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise BadInput(f"output folder {out_dir!r} is not a folder in the checkout")
        out.mkdir(parents=True, exist_ok=True)
    # -- pull / executor
    executor: Executor
    env_override: dict[str, Any] = {}
    if opts.backend == "docker":
        from replay_tui.replay import docker as dk

        on_event(ReplayEvent("pull", "start", plan.image or ""))
        c = docker_client or dk.client()
        assert plan.image is not None
        img = dk.ensure_image(c, plan.image)
        on_event(ReplayEvent("pull", "done", f"image {img.id[:19]}"))
        root = dk.CONTAINER_ROOT
        ccwd = root if plan.workdir == "." else f"{root}/{plan.workdir}"
        top_level = [a.path for a in m.outputs.artifacts if "/" not in a.path]
        if top_level:  # the run writes beside its code: only a throwaway checkout allows it
            on_event(
                ReplayEvent(
                    "pull",
                    "note",
                    f"{top_level[0]} is written at the top of the workdir: the throwaway"
                    " checkout is mounted writable",
                )
            )
        mounts = [dk.Mount(str(wt.path), root, not top_level)]
        for out_dir in plan.output_dirs:
            mounts.append(dk.Mount(str(cwd / out_dir), f"{ccwd}/{out_dir}", False))
        for dm in plan.data:
            if dm.host_path is None or not dm.host_path.exists():
                continue
            if repo_loc is not None and dm.host_path.is_relative_to(repo_loc):
                mounts.append(dk.Mount(str(dm.host_path), f"{root}/{dm.info.path}", True))
            else:
                mounts.append(dk.Mount(str(dm.host_path), str(dm.host_path), True))
        executor = dk.DockerExecutor(
            img.id,
            mounts,
            ccwd,
            dk.Sandbox(
                network=opts.network,
                gpus=plan.use_gpus,
                pids_limit=opts.pids_limit,
                memory_limit=opts.memory_limit,
            ),
            c,
            probe_cache=store.path.parent / "image-probes",
        )
        env_override = {"image": dk.image_info(c, plan.image)}
    else:
        on_event(
            ReplayEvent(
                "pull",
                "done",
                "local backend: no image (environment not pinned); the recorded command runs"
                " on this host without a sandbox",
            )
        )
        executor = LocalExecutor()
    # -- run
    on_event(ReplayEvent("run", "start", " ".join(plan.argv)))
    handoff = tmp / "handoff"
    handoff.mkdir()
    log_path = tmp / "output.log"
    env = dict(plan.env)
    env[HANDOFF_ENV] = str(handoff)
    series = MetricSeries()
    regexes = (
        [MetricRegex(p, m.capture.metric_name) for p in m.capture.metric_regex] if m.capture else []
    )

    def line(text: str) -> None:
        for rx in regexes:
            rx.feed(text, series)
        on_event(ReplayEvent("run", "log", text))

    result: ExecResult = executor.run(
        ExecSpec(plan.argv, cwd, env, handoff, log_path, opts.timeout_s), line, should_cancel
    )
    on_event(
        ReplayEvent(
            "run",
            "done" if result.status == "succeeded" else "failed",
            f"{result.status} in {result.duration_s:.1f}s"
            + (f": {result.reason}" if result.reason else ""),
        )
    )
    # -- hash
    on_event(ReplayEvent("hash", "start"))
    inside = read_inside(handoff)
    patterns = [a.path for a in m.outputs.artifacts]
    if m.capture:
        patterns += [g for g in m.capture.artifact_globs if g not in patterns]
    artifacts = artifact_entries(cwd, patterns, inside.get("artifacts") or [])
    if m.capture and m.capture.metrics_file:
        series.merge(read_metrics_file(cwd / m.capture.metrics_file))
    log_bytes = log_path.read_bytes() if log_path.exists() else b""
    log_sha = sha256_hex(log_bytes)
    if opts.backend == "local":
        python = probes.probe_python(probes.interpreter_for(plan.argv, "python3"))
    else:
        python = probes.PythonEnv()
    g = probes.GitState(
        root=wt.path,
        repo_url=m.code.repo_url,
        commit=m.code.commit,
        branch=m.code.branch,
        dirty=m.code.dirty,
        diff=diff,
        untracked=[],
        workdir=m.workdir,
    )
    outside = Outside(
        git=g,
        python=python,
        gpus=probes.probe_gpus() if plan.use_gpus else probes.GpuProbe(),
        data=verified,
        locations=[],
        env=plan.env,
    )
    replay_info = {
        "backend": opts.backend,
        "environment_pinned": opts.backend == "docker",
        "network": opts.network,
        "gpus": "all" if plan.use_gpus else "none",
        "cpu_fallback": plan.cpu_fallback,
        "forced_data": forced,
        "diff_applied": wt.diff_applied,
        "determinism": opts.determinism,
        "reason": result.reason,
    }
    from replay_tui.capture.launcher import _log_tail

    rm = build_manifest(
        run_id=_uuid7(),
        name=m.name,
        argv=plan.argv,
        tags=m.tags,
        outside=outside,
        result=result,
        inside=inside,
        artifacts=artifacts,
        metrics=series,
        log_sha256=log_sha,
        log_tail=_log_tail(log_path) if result.status != "succeeded" else "",
        seed=m.randomness.seed,
        image=env_override.get("image")
        or (m.image.model_dump() if m.image and opts.backend == "docker" else None),
        diff_sha256=m.code.diff_sha256,
        kind="replay",
        replay_of=m.run_id,
        replay=replay_info,
        capture=m.capture.model_dump() if m.capture else None,
    )
    from replay_tui.gaps import gap_counts

    store.ingest(
        rm,
        gaps=gap_counts(rm),
        locations=[Location("workdir", "cwd", str(cwd))] if opts.keep_workdir else [],
        blobs={log_sha: ("log", log_bytes)},
    )
    keep_artifacts(store, cwd, rm)
    keep_log(store, rm.run_id, log_bytes)
    on_event(ReplayEvent("hash", "done", f"{len(artifacts)} artifact(s) hashed"))
    # -- compare
    on_event(ReplayEvent("compare", "start"))
    verdict, body, cid = compare_and_store(store, m, rm)
    fid = store.add_replay(
        m.run_id,
        replay_run=rm.run_id,
        backend=opts.backend,
        status=result.status,
        verdict=verdict,
        reason=result.reason,
        duration_s=result.duration_s,
        comparison_id=cid,
        body={"replay": replay_info, "verdict": verdict, "duration_s": result.duration_s},
    )
    on_event(ReplayEvent("compare", "done", verdict))
    code = 0 if verdict in ("IDENTICAL", "EQUIVALENT") else 1
    return ReplayOutcome(m, rm, verdict, body, code, result.reason, fid, time.monotonic() - t0)


def compare_and_store(
    store: RunStore,
    a: RunManifest,
    b: RunManifest,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> tuple[str, dict[str, Any], int]:
    """Compare two runs with the full comparison and store the result."""
    from replay_tui.compare.verdict import DEFAULT_ATOL, DEFAULT_RTOL, compare_runs

    cmp = compare_runs(
        a,
        b,
        objects=ObjectStore.beside(store.path),
        rtol=DEFAULT_RTOL if rtol is None else rtol,
        atol=DEFAULT_ATOL if atol is None else atol,
    )
    body = cmp.to_dict()
    cid = store.add_comparison(
        a.run_id,
        b.run_id,
        cmp.verdict,
        body,
        rtol=cmp.rtol,
        atol=cmp.atol,
        set_verdict_on=b.run_id,
    )
    return cmp.verdict, body, cid
