"""Replay a recorded run, stage by stage, and store what happened.

Stages: plan, checkout, verify (data hashes), place (data and output folders in the
checkout), pull (the backend prepares its executor: the image by digest, a Slurm job...),
run, hash, compare: one function each, sharing a :class:`ReplayContext`.
Every stage reports through ``on_event``; ``should_cancel`` stops the run.  A replay
that fails after planning is still stored as a replay fact with its reason, so the
ledger says what was tried and why it did not work.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.capture import probes, stale
from replay_tui.capture.argv_config import parse_argv
from replay_tui.capture.assemble import build_manifest
from replay_tui.capture.collect import collect_outputs
from replay_tui.capture.executor import ExecSpec
from replay_tui.capture.hashing import StatCache, hash_path
from replay_tui.capture.keep import keep_artifacts, keep_run
from replay_tui.capture.metrics import MetricRegex
from replay_tui.capture.outputs import EarlyOutputs, OutputBudget
from replay_tui.capture.outside import Outside
from replay_tui.compare.tolerance import Tolerance
from replay_tui.errors import BadInput, InfraError, ReplayTuiError
from replay_tui.replay import debris
from replay_tui.replay.backends import get_backend
from replay_tui.replay.checkout import find_repo, make_worktree
from replay_tui.replay.consent import check_local_consent
from replay_tui.replay.context import OnEvent, ReplayBackend, ReplayContext, ReplayEvent
from replay_tui.replay.plan import ReplayOptions, ReplayPlan, make_plan
from replay_tui.sdk import HANDOFF_ENV, uuid7
from replay_tui.verdicts import (
    CANCELLED,
    COMPLETED,
    INFRA_ERROR,
    INTERRUPTED,
    ReplayStatus,
    Verdict,
    counts_as_evidence,
    environment_failure,
    outcome_word,
    replay_status,
)
from replay_tui.verdicts import exit_code as verdict_exit_code
from storage.ledger import utc_now
from storage.manifest import RunManifest, canonical_json
from storage.objects import ObjectStore
from storage.store import Location, RunStore

if TYPE_CHECKING:
    from replay_tui.compare.comparison import Comparison

__all__ = [
    "STAGES",
    "OnEvent",
    "ReplayContext",
    "ReplayEvent",
    "ReplayOutcome",
    "compare_and_store",
    "replay_manifest",
    "replay_run",
]

STAGES = ("plan", "checkout", "verify", "pull", "run", "hash", "compare")


@dataclass(frozen=True, kw_only=True)
class ReplayOutcome:
    original: RunManifest
    replay: RunManifest | None
    verdict: Verdict | None
    comparison: Comparison | None
    """The replay compared with its original (stored as ``comparison_id``); None when
    no comparison was made (a probe, a judgement deferred)."""
    exit_code: int
    reason: str | None
    replay_fact_id: int | None
    duration_s: float
    status: ReplayStatus = COMPLETED  # how far the replay got (replay_tui.verdicts)
    comparison_id: int | None = None  # the stored comparison of original and replay
    pending: Pending | None = None
    """Set when ``options.defer_judgement``: what :func:`judge_pending` needs."""


@dataclass
class Pending:
    """A replay that ran and was hashed (its manifest stored), its judgement not yet made:
    the comparison and the replay fact are written by :func:`judge_pending`."""

    original: RunManifest
    replay: RunManifest
    status: ReplayStatus
    reason: str | None
    host_fault: str | None
    duration_s: float
    replay_info: dict[str, Any]
    options: ReplayOptions
    emit: Callable[[str, str, str], None]
    t0: float


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
    original_id = store.resolve(run_ref)
    original = store.manifest(original_id)
    locations = store.locations(original_id)
    data_locs = {loc.name: loc.host_path for loc in locations if loc.role == "data"}
    repo_loc = next((Path(loc.host_path) for loc in locations if loc.role == "repo"), None)
    return replay_manifest(
        store,
        original,
        options,
        data_locations=data_locs,
        repo_location=repo_loc,
        on_event=on_event,
        should_cancel=should_cancel,
        docker_client=docker_client,
    )


def replay_manifest(
    store: RunStore,
    original: RunManifest,
    options: ReplayOptions,
    *,
    data_locations: dict[str, str],
    repo_location: Path | None,
    on_event: OnEvent = _noop,
    should_cancel: Callable[[], bool] = lambda: False,
    docker_client: Any = None,
    persist: bool = True,
) -> ReplayOutcome:
    """Run ``original`` (a manifest, stored or built in memory) through every stage.

    With ``persist`` the replay manifest, its comparison with ``original`` and a replay
    fact are stored (a failure after planning is stored too, with its reason).  Without
    it (a bisect probe) nothing is written but the artifacts' content-addressed copies:
    the outcome carries the replay manifest for the caller to compare.
    """
    t0 = time.monotonic()
    backend = get_backend(options.backend)
    # a probe (not persisted) has a new run id and no row: its caller checked the origins
    # of the runs it mixes (bisect._check_origin) before building it
    ctx_plan = stage_plan(
        store, original, options, backend, data_locations, on_event, consent=persist
    )
    holder: list[ReplayContext] = []
    tmp: Path | None = None

    def store_unfinished(status: str, reason: str, body: dict[str, Any]) -> None:
        """The attempt as a replay fact with no replay run and no verdict (persisted)."""
        if persist:
            store.add_replay(
                original.run_id,
                replay_run=None,
                backend=options.backend,
                status=status,
                verdict=None,
                reason=reason,
                duration_s=time.monotonic() - t0,
                comparison_id=None,
                body=body,
                sets_verdict=False,
            )

    try:
        try:
            base = backend.scratch_base(store, options)
            if base is not None:
                base.mkdir(parents=True, exist_ok=True)
            debris.sweep_scratch(
                {base, None}, lambda note: on_event(ReplayEvent("plan", "note", note))
            )
            tmp = Path(tempfile.mkdtemp(prefix=debris.SCRATCH_PREFIX, dir=base))
            attempt = uuid7()
            claim = debris.claim(tmp, attempt=attempt, repo=repo_location)
            if persist:  # the ledger knows a replay was tried even if this process dies
                store.put_blob(
                    canonical_json(
                        {
                            "attempt": attempt,
                            "original_run": original.run_id,
                            "backend": options.backend,
                            "started_at": utc_now(),
                            **{k: claim.owner[k] for k in ("host", "pid")},
                        }
                    ),
                    "replay-attempt",
                    original.run_id,
                )
            ctx = ReplayContext(
                store,
                ctx_plan,
                backend,
                tmp,
                repo_location,
                on_event,
                should_cancel,
                docker_client,
                t0,
                persist=persist,
                claim=claim,
            )
            holder.append(ctx)
            for stage in (
                stage_checkout,
                stage_verify,
                stage_place,
                stage_pull,
                stage_run,
                stage_hash,
            ):
                stage(ctx)
            if not persist:
                return ReplayOutcome(
                    original=original,
                    replay=ctx.replay,
                    verdict=None,
                    comparison=None,
                    exit_code=0,
                    reason=ctx.result.reason if ctx.result else None,
                    replay_fact_id=None,
                    duration_s=time.monotonic() - t0,
                )
            return stage_compare(ctx)
        except KeyboardInterrupt:
            store_unfinished(
                INTERRUPTED,
                "interrupted before the replay finished (Ctrl-C)",
                {"reason": "interrupted"},
            )
            raise
        except ReplayTuiError as e:
            reason = e.message
            store_unfinished(
                INFRA_ERROR, reason, {"reason": reason, "hint": e.hint, "exit_code": e.exit_code}
            )
            on_event(ReplayEvent("replay", "failed", reason))
            raise
    finally:
        kept = False
        for c in holder:
            if c.early is not None:
                c.early.close()  # staged copies not taken are dropped
            walls = getattr(c.prepared.executor, "close", None) if c.prepared else None
            if walls is not None:  # the sandbox's bounded folders, before the checkout goes
                walls(keep=options.keep_workdir)
            if c.worktree is None:
                continue
            if options.keep_workdir:
                on_event(ReplayEvent("run", "note", f"worktree kept at {c.worktree.path}"))
                if c.claim is not None:
                    c.claim.release()  # kept on purpose: the next replay leaves it alone
                kept = True
            else:
                c.worktree.remove()
        if tmp is not None and not kept:
            shutil.rmtree(tmp, ignore_errors=True)


# -- the stages, in order ---------------------------------------------------------------


def stage_plan(
    store: RunStore,
    original: RunManifest,
    options: ReplayOptions,
    backend: ReplayBackend,
    data_locations: dict[str, str],
    on_event: OnEvent,
    *,
    consent: bool = True,
) -> ReplayPlan:
    on_event(ReplayEvent("plan", "start"))
    host_gpu = (
        (getattr(backend, "gpus_from_scheduler", False) or probes.gpu_available())
        if (original.hardware.gpus or options.gpus == "all")
        else False
    )
    plan = make_plan(
        original,
        options,
        data_locations=data_locations,
        host_has_gpu=host_gpu,
        needs_image=backend.needs_image,
    )
    if consent:  # an ingested/imported run never runs unsandboxed unasked
        check_local_consent(
            store,
            original,
            sandboxed=backend.pins_environment,
            allowed=options.allow_foreign_on_host,
        )
    on_event(
        ReplayEvent(
            "plan",
            "done",
            f"{backend.name} backend, image {plan.image or '(host)'}, commit {plan.commit[:12]}"
            + (", CPU fallback" if plan.cpu_fallback else ""),
        )
    )
    return plan


def stage_checkout(ctx: ReplayContext) -> None:
    plan, opts, m = ctx.plan, ctx.plan.options, ctx.plan.original
    ctx.emit("checkout", "start", f"commit {plan.commit}")
    repo = find_repo(
        plan.commit,
        explicit=opts.repo,
        recorded=ctx.repo_location,
        repo_url=m.code.repo_url,
        cache_dir=ctx.store.path.parent / "repos",
        allow_fetch=opts.fetch_repo,
        on_note=lambda text: ctx.emit("checkout", "note", text),
    )
    if m.code.dirty and m.code.diff_sha256:
        ctx.diff = ctx.store.get_blob(m.code.diff_sha256)
        if ctx.diff is None:
            raise InfraError(f"the stored diff {m.code.diff_sha256[:12]} is missing from the store")
    if ctx.claim is not None:
        debris.set_repo(ctx.claim, repo)  # so a sweep can prune the worktree registration
    ctx.worktree = wt = make_worktree(repo, plan.commit, ctx.diff, base=ctx.tmp)
    ctx.emit(
        "checkout",
        "done",
        f"worktree {wt.path}" + (" with the stored diff applied" if wt.diff_applied else ""),
    )


def stage_verify(ctx: ReplayContext) -> None:
    """Every data input is where this host recorded it and hashes as recorded."""
    plan, opts = ctx.plan, ctx.plan.options
    ctx.emit("verify", "start", f"{len(plan.data)} data input(s)")
    with StatCache(ctx.store.path.parent / "hashcache.db") as cache:
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
                ctx.forced_data = True
                ctx.emit("verify", "note", problem + " (--force-data: going on)")
            entry = d.model_dump(mode="json")
            if digest is not None:
                entry.update(
                    sha256=digest.sha256, size_bytes=digest.size_bytes, file_count=digest.file_count
                )
            ctx.verified_data.append(entry)
    ctx.emit("verify", "done", "data forced" if ctx.forced_data else "every data hash matches")


def stage_place(ctx: ReplayContext) -> None:
    """Put exactly the verified data and empty output folders into the checkout.

    Data that lived in the recording repository goes to its recorded place in the
    checkout, replacing whatever the commit tracks there: a folder only partly tracked
    by git (a ``prepare.py`` committed, the generated ``train.bin`` ignored) must show
    the program every file the data hash covered, not the tracked subset.  A backend
    that mounts data gets an empty mount point there; the local backend a link.
    """
    plan = ctx.plan
    assert ctx.worktree is not None
    wt_root = ctx.worktree.path.resolve()
    cwd = (wt_root / plan.workdir).resolve()
    if not cwd.is_relative_to(wt_root):
        raise BadInput(f"workdir {plan.workdir!r} escapes the repository")
    cwd.mkdir(parents=True, exist_ok=True)
    ctx.cwd = cwd
    repo_loc = ctx.repo_location
    for dm in plan.data:
        if dm.host_path is None or not dm.host_path.exists():
            continue
        if repo_loc is None or not dm.host_path.resolve().is_relative_to(repo_loc.resolve()):
            continue  # outside the repository: used (or mounted) at its own path
        target = (wt_root / dm.info.path).resolve() if dm.info.path != "." else wt_root
        if target == wt_root or not target.is_relative_to(wt_root):
            raise BadInput(f"data path {dm.info.path!r} does not name a place in the checkout")
        _clear(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if ctx.backend.mounts_data:
            if dm.host_path.is_dir():
                target.mkdir()
            else:
                target.touch()
        else:
            target.symlink_to(dm.host_path.resolve(), target_is_directory=dm.host_path.is_dir())
        ctx.placed_data.add(dm.info.path)
    for out_dir in plan.output_dirs:
        out = cwd / out_dir
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise BadInput(f"output folder {out_dir!r} is not a folder in the checkout")
        out.mkdir(parents=True, exist_ok=True)
    # What the checkout already holds where outputs go (files the commit tracks there):
    # never claimed as the replay's outputs.
    ctx.stale_before = stale.snapshot(cwd, _output_patterns(plan.original))


def _clear(path: Path) -> None:
    """Remove what the checkout has at ``path`` (a tracked file, folder or link)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _output_patterns(m: RunManifest) -> list[str]:
    """The recorded artifacts' paths and the recording's artifact globs."""
    patterns = [a.path for a in m.outputs.artifacts]
    if m.capture:
        patterns += [g for g in m.capture.artifact_globs if g not in patterns]
    return patterns


def stage_pull(ctx: ReplayContext) -> None:
    prepared = ctx.backend.prepare(ctx)
    for note in prepared.notes:
        ctx.emit("pull", "note", note)
    ctx.emit("pull", "done", prepared.message)
    ctx.prepared = prepared


def _import_tensor_comparison() -> None:
    with contextlib.suppress(Exception):  # only lost time: imported again when needed
        import torch  # noqa: F401

        import replay_tui.compare.tensors  # noqa: F401


def warm_tensor_comparison(m: RunManifest) -> threading.Thread | None:
    """Import torch while the replay runs where its checkpoints will likely be compared
    tensor by tensor: a run recorded without deterministic algorithms seldom replays bit
    for bit, and its comparison would otherwise start with torch's import after the run
    (~3 s on a CPU, more with CUDA's libraries).  A thread: the wait is on the run."""
    if "torch" in sys.modules or m.determinism.deterministic_algorithms:
        return None
    if not any(a.kind == "checkpoint" for a in m.outputs.artifacts):
        return None
    t = threading.Thread(target=_import_tensor_comparison, name="replay-tui-warm", daemon=True)
    t.start()
    return t


def stage_run(ctx: ReplayContext) -> None:
    plan, m = ctx.plan, ctx.plan.original
    assert ctx.prepared is not None and ctx.cwd is not None
    ctx.emit("run", "start", " ".join(plan.argv))
    ctx.handoff = ctx.tmp / "handoff"
    ctx.handoff.mkdir()
    ctx.log_path = ctx.tmp / "output.log"
    env = dict(plan.env)
    env[HANDOFF_ENV] = str(ctx.handoff)
    regexes = (
        [MetricRegex(p, m.capture.metric_name) for p in m.capture.metric_regex] if m.capture else []
    )

    def line(text: str) -> None:
        for rx in regexes:
            rx.feed(text, ctx.series)
        ctx.emit("run", "log", text)

    # outputs read as the run closes them, where it writes them on this machine
    if getattr(ctx.backend, "writes_on_this_host", True):
        ctx.early = EarlyOutputs.start(
            ctx.cwd,
            _output_patterns(m),
            ObjectStore.beside(ctx.store.path),
            ctx.stale_before.files if ctx.stale_before is not None else {},
            _budget(plan.options).limit,
        )
    warm_tensor_comparison(m)
    result = ctx.prepared.executor.run(
        ExecSpec(
            plan.argv,
            ctx.cwd,
            env,
            ctx.handoff,
            ctx.log_path,
            plan.options.timeout_s,
            clear_training_env=True,
        ),
        line,
        ctx.should_cancel,
    )
    if ctx.early is not None:
        ctx.early.finish()
    ctx.result = result
    ctx.emit(
        "run",
        "done" if result.status == "succeeded" else "failed",
        f"{result.status} in {result.duration_s:.1f}s"
        + (f": {result.reason}" if result.reason else ""),
    )


def _budget(opts: ReplayOptions) -> OutputBudget:
    """The replay's output budget: ``--output-budget``, else the variable's or the
    default (``capture.outputs.OutputBudget``)."""
    return OutputBudget.chosen(opts.output_budget, flag="--output-budget")


def stage_hash(ctx: ReplayContext) -> None:
    """Hash what the run left behind and build the replay manifest."""
    plan, opts, m = ctx.plan, ctx.plan.options, ctx.plan.original
    assert ctx.result is not None and ctx.cwd is not None and ctx.worktree is not None
    assert ctx.handoff is not None and ctx.log_path is not None and ctx.prepared is not None
    result, cwd, log_path = ctx.result, ctx.cwd, ctx.log_path
    ctx.emit("hash", "start")
    try:  # each output read once: hashed, digested and kept (or taken as read early)
        out = collect_outputs(
            cwd,
            _output_patterns(m),
            ctx.handoff,
            log_path,
            metrics_file=m.capture.metrics_file if m.capture else None,
            series=ctx.series,
            succeeded=result.status == "succeeded",
            before=ctx.stale_before,
            one_pass=True,
            objects=ObjectStore.beside(ctx.store.path),
            early=ctx.early,
            budget=_budget(opts),
        )
    finally:
        if ctx.early is not None:
            ctx.early.close()
    for why in out.refused:
        ctx.emit("hash", "note", f"refused: {why}")
    g = probes.GitState(
        root=ctx.worktree.path,
        repo_url=m.code.repo_url,
        commit=m.code.commit,
        branch=m.code.branch,
        dirty=m.code.dirty,
        diff=ctx.diff,
        untracked=[],
        workdir=m.workdir,
    )
    outside = Outside(
        git=g,
        python=ctx.backend.python_env(ctx),
        # GPUs seen by this host; a scheduler's GPUs are on another machine, which this
        # host cannot probe: recorded as unknown (a gap) rather than as this host's.
        gpus=probes.probe_gpus()
        if plan.use_gpus and not getattr(ctx.backend, "gpus_from_scheduler", False)
        else probes.GpuProbe(),
        data=ctx.verified_data,
        locations=[],
        env=plan.env,
    )
    ctx.replay_info = {
        "backend": opts.backend,
        "environment_pinned": ctx.backend.pins_environment,
        "network": opts.network,
        "gpus": "all" if plan.use_gpus else "none",
        "cpu_fallback": plan.cpu_fallback,
        "forced_data": ctx.forced_data,
        "diff_applied": ctx.worktree.diff_applied,
        "determinism": opts.determinism,
        "reason": result.reason,
    }
    job = getattr(ctx.prepared.executor, "job_info", None)  # where a scheduler ran it
    if job:
        ctx.replay_info["job"] = dict(job)
    walls = getattr(ctx.prepared.executor, "sandbox_info", None)  # its limits, as run
    if walls:
        ctx.replay_info["sandbox"] = dict(walls)
    runtime = getattr(ctx.prepared.executor, "runtime_info", None)  # what ran, by identity
    if runtime:
        ctx.replay_info["runtime"] = dict(runtime)
    image = ctx.prepared.image
    if image is None and m.image and ctx.backend.pins_environment:
        image = m.image.model_dump()
    rm = build_manifest(
        run_id=uuid7(),
        name=m.name,
        argv=plan.argv,
        tags=m.tags,
        outside=outside,
        result=result,
        inside=out.inside,
        artifacts=out.artifacts,
        metrics=ctx.series,
        log_sha256=out.log_sha256,
        log_tail=out.log_tail,
        seed=m.randomness.seed,
        image=image,
        diff_sha256=m.code.diff_sha256,
        kind="replay",
        replay_of=m.run_id,
        replay=ctx.replay_info,
        capture=m.capture.model_dump() if m.capture else None,
        # config as recorded; argv is the manifest's: files only inside the checkout
        argv_config=parse_argv(plan.argv, cwd, ctx.worktree.path, confine=True),
        frameworks=out.frameworks,
    )
    if ctx.persist:
        keep_run(
            ctx.store,
            rm,
            cwd,
            out,
            locations=[Location("workdir", "cwd", str(cwd))] if opts.keep_workdir else [],
        )
    else:  # a probe: only the artifacts' bytes, for the caller's comparison
        keep_artifacts(ctx.store, cwd, rm)
    ctx.replay = rm
    ctx.emit("hash", "done", f"{len(out.artifacts)} artifact(s) hashed")


def stage_compare(ctx: ReplayContext) -> ReplayOutcome:
    m, rm, result = ctx.plan.original, ctx.replay, ctx.result
    assert rm is not None and result is not None
    # how far the replay got (replay_tui.verdicts): only a completed one is evidence
    status = replay_status(
        result.status, cancel_requested=ctx.should_cancel(), exit_code=result.exit_code
    )
    # the executor may know the machine ended it (a Slurm node failure, a preemption)
    infra = getattr(ctx.prepared.executor, "infra_fault", None) if ctx.prepared else None
    host_fault = infra or environment_failure(result.status, rm.outputs.log_tail or "", m.status)
    status = INFRA_ERROR if host_fault else status
    reason = host_fault or result.reason
    if status == CANCELLED and not (reason or "").startswith("cancelled"):
        reason = "cancelled on request: the command was stopped"  # not "interrupted"
    pending = Pending(
        m,
        rm,
        status,
        reason,
        host_fault,
        result.duration_s,
        dict(ctx.replay_info),
        ctx.plan.options,
        ctx.emit,
        ctx.t0,
    )
    if ctx.plan.options.defer_judgement:
        ctx.emit("compare", "note", "judged once every replica has run")
        return ReplayOutcome(
            original=m,
            replay=rm,
            verdict=None,
            comparison=None,
            exit_code=1,
            reason=reason,
            replay_fact_id=None,
            duration_s=time.monotonic() - ctx.t0,
            status=status,
            pending=pending,
        )
    return judge_pending(ctx.store, pending)


def judge_pending(
    store: RunStore,
    p: Pending,
    *,
    comparison: Comparison | None = None,
    sets_verdict: bool = True,
    note: str | None = None,
) -> ReplayOutcome:
    """Compare a replay with its original (against the run's noise floor, when one is
    stored), store the comparison and the replay fact, and say the verdict.
    ``comparison``: that comparison, already made (not made again).  ``sets_verdict``:
    False keeps a judgement the rule does not trust yet (one replay of a noisy run with
    no floor) off the run's badge.  ``note``: said after the verdict, kept as the reason."""
    m, rm, status, reason = p.original, p.replay, p.status, p.reason
    p.emit("compare", "start", "")
    verdict, cmp, cid = compare_and_store(
        store, m, rm, tolerance=p.options.tolerance, comparison=comparison
    )
    reason = note or reason
    fid = store.add_replay(
        m.run_id,
        replay_run=rm.run_id,
        backend=p.options.backend,
        status=status,
        verdict=verdict,
        reason=reason,
        duration_s=p.duration_s,
        comparison_id=cid,
        body={
            "replay": p.replay_info,
            "verdict": verdict,
            "duration_s": p.duration_s,
            "run_status": rm.status,
        },
        sets_verdict=sets_verdict and counts_as_evidence(status, verdict, p.options.determinism),
    )
    p.emit(
        "compare",
        "done",
        verdict
        if status == COMPLETED
        else f"{outcome_word(status, verdict)}: not counted as evidence"
        f" (its outputs compared {verdict or 'nothing'})",
    )
    if p.host_fault:
        p.emit("replay", "failed", p.host_fault)
    code = verdict_exit_code(status, verdict)
    t = time.monotonic() - p.t0
    return ReplayOutcome(
        original=m,
        replay=rm,
        verdict=verdict,
        comparison=cmp,
        exit_code=code,
        reason=reason,
        replay_fact_id=fid,
        duration_s=t,
        status=status,
        comparison_id=cid,
    )


def compare_and_store(
    store: RunStore,
    a: RunManifest,
    b: RunManifest,
    *,
    tolerance: Tolerance | None = None,
    set_verdict_on: str | None = "b",
    comparison: Comparison | None = None,
) -> tuple[Verdict, Comparison, int]:
    """Compare two runs with the full comparison, against the noise floor that speaks for
    the pair when one is stored (``compare.floor``), and store the result (its
    ``to_dict()``).  The verdict, the comparison and its id.
    ``set_verdict_on``: ``"b"`` (B's badge takes the verdict) or None."""
    cmp = comparison or compare_pair(store, a, b, tolerance or Tolerance())
    cid = store.add_comparison(
        a.run_id,
        b.run_id,
        cmp.verdict,
        cmp.to_dict(),
        rtol=cmp.rtol,
        atol=cmp.atol,
        set_verdict_on=b.run_id if set_verdict_on == "b" else None,
    )
    return cmp.verdict, cmp, cid


def compare_pair(
    store: RunStore, a: RunManifest, b: RunManifest, tolerance: Tolerance
) -> Comparison:
    """The full comparison of A and B as every command makes it: the objects beside the
    store, the tolerance given, and the noise floor that speaks for the pair."""
    from replay_tui.compare.comparison import compare_runs
    from replay_tui.compare.floor import noise_context

    return compare_runs(
        a,
        b,
        objects=ObjectStore.beside(store.path),
        rtol=tolerance.rtol,
        atol=tolerance.atol,
        noise=noise_context(store, a, b, tolerance),
    )
