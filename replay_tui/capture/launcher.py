"""The launcher: run any training command and record it from the outside.

``record`` reads the code and the data before the run, runs the command through an
``Executor`` (local process, or a container for ``--image``) while it probes the
environment and the hardware beside it, streams and keeps the command's output, then
hashes artifacts (a checkpoint read once for its sha256 and its tensor digest), reads
metrics and the SDK's inside view, and stores one sealed manifest in a single
transaction.  A failing or interrupted command is still recorded; nothing half-written
reaches the store.

This module holds the order of a recording; each step lives in its own module of
``capture``: ``options`` (what is asked), ``outside`` (what is learnt before the run),
``executor`` (the command run), ``side_threads`` (what is done beside it), ``collect``
(what it left: ``handoff`` for the SDK's view, ``artifacts`` for the output files),
``assemble`` (the manifest built), ``keep`` (the run stored) and ``timing`` (the marks).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.capture import probes, stale
from replay_tui.capture.argv_config import parse_argv
from replay_tui.capture.assemble import build_manifest
from replay_tui.capture.collect import collect_outputs
from replay_tui.capture.executor import (
    ExecResult,
    ExecSpec,
    Executor,
    LocalExecutor,
    OnLine,
    ShouldCancel,
)
from replay_tui.capture.hashing import StatCache
from replay_tui.capture.keep import keep_run
from replay_tui.capture.metrics import MetricRegex, MetricSeries
from replay_tui.capture.options import RecordOptions, capture_info
from replay_tui.capture.outputs import EarlyOutputs, OutputBudget
from replay_tui.capture.outside import Place, as_locations, probe_outside
from replay_tui.capture.side_threads import SideWork
from replay_tui.capture.timing import Marks
from replay_tui.errors import BadInput
from replay_tui.sdk import HANDOFF_ENV, uuid7

if TYPE_CHECKING:
    from storage.manifest import RunManifest
    from storage.store import RunStore

# The manifest's models (pydantic), the store and the object store are imported where
# they are used: ``record`` launches the command first and imports them while it runs
# (``side_threads``); only what the launch itself needs is imported before it.


@dataclass
class RecordResult:
    manifest: RunManifest
    exit: ExecResult
    log_path: Path
    refused: tuple[str, ...] = ()
    """Outputs (and handoff parts) not taken, and why: links, stale files, files outside
    the output folder, sparse files, files past the output budget.  Each is also a gap
    of the manifest; the caller says them."""
    unmatched: tuple[str, ...] = ()
    """Artifact globs that matched no file (gap ``ARTIFACT_GLOB_EMPTY``)."""


SEQUENTIAL_ENV = "REPLAY_TUI_RECORD_SEQUENTIAL"
"""Set (to anything but ``0``): ``record`` does everything in turn, as it did before the
overlap: the probes before the command, the outputs hashed and fingerprinted with torch
after it.  The manifest is the same either way (tests/capture/test_record_overhead.py);
the benchmark uses it as its reference (bench/bench_record.py)."""


@dataclass(frozen=True)
class StoreLater:
    """The store to keep the run in, opened by ``record`` only once the command has
    ended: before the launch it needs the path alone (the hash cache and the object
    store lie beside it).  ``opener`` runs in the caller's thread; the caller checks
    before what it can without opening it (see ``cli.record``)."""

    path: Path
    opener: Callable[[], RunStore]


def record(
    opts: RecordOptions,
    store: RunStore | StoreLater,
    *,
    executor: Executor | None = None,
    on_line: OnLine | None = None,
    should_cancel: ShouldCancel | None = None,
    image_info: Callable[[], dict[str, Any] | None] | None = None,
) -> RecordResult:
    """Run ``opts.argv`` and store its manifest.  Returns whatever the command did.

    What does not depend on the command (its Python's packages, the GPUs, the imports
    that reading its outputs needs) is done while it runs (:class:`SideWork`); the code
    and the data are read before it starts; after it ends, each checkpoint is read once
    for its sha256 and its tensor digest, and copied into the object store in that read
    (:func:`artifact_entries` ``one_pass`` and ``objects``).  Before the launch only
    what the launch needs is imported and done; the store (a :class:`StoreLater`) is
    opened after the command ended, its modules imported while it ran.
    ``REPLAY_TUI_RECORD_SEQUENTIAL`` does it all in turn instead (the store opened first,
    each output copied after the manifest is built); the manifest is the same.
    """
    sequential = os.environ.get(SEQUENTIAL_ENV, "") not in ("", "0")
    marks = Marks("sequential" if sequential else "overlapped")
    if sequential and isinstance(store, StoreLater):
        store = store.opener()
    store_path = store.path
    if isinstance(store, StoreLater) and store_path.name != ":memory:":
        store_path.parent.mkdir(parents=True, exist_ok=True)  # as opening it would
    if not opts.argv:
        raise BadInput("nothing to record: give the command after --")
    for pat in opts.metric_regex:
        MetricRegex(pat, opts.metric_name)  # validate before running anything
    _check_globs(opts.artifacts)
    budget = OutputBudget.chosen(opts.output_budget, flag="--output-budget")
    regexes = [MetricRegex(p, opts.metric_name) for p in opts.metric_regex]
    cache = StatCache(store_path.parent / "hashcache.db") if store_path.name else None
    # the run's Python: argv[0] when it is a python, else the interpreter a launcher
    # script names (torchrun's, accelerate's, deepspeed's shebang line)
    interpreter = probes.interpreter_for(opts.argv, sys.executable, opts.cwd)
    side = None if sequential else SideWork(None if opts.image else interpreter).start()
    places: list[Place] | None = None if sequential else []
    try:
        outside = probe_outside(opts, cache, interpreter, side, places)
        argv_cfg = parse_argv(opts.argv, opts.cwd, outside.git.root)
    finally:
        if cache is not None:
            cache.close()
    series = MetricSeries()
    t_start = time.monotonic()  # the command starts next: a printed metric's wall time

    def line(text: str) -> None:
        for rx in regexes:
            rx.feed(text, series, time.monotonic() - t_start)
        if on_line is not None:
            on_line(text)

    run_id = uuid7()
    with tempfile.TemporaryDirectory(prefix="replay-tui-rec-") as tmp:
        handoff = Path(tmp) / "handoff"
        handoff.mkdir()
        log_path = Path(tmp) / "output.log"
        env = dict(outside.env)
        env[HANDOFF_ENV] = str(handoff)
        spec = ExecSpec(opts.argv, opts.cwd, env, handoff, log_path, opts.timeout_s)
        before = stale.snapshot(opts.cwd, opts.artifacts)  # what earlier runs left there
        objects, early = None, None
        if not sequential:
            from storage.objects import ObjectStore

            objects = ObjectStore.beside(store_path)
            early = EarlyOutputs.start(
                opts.cwd, opts.artifacts, objects, before.files, budget.limit
            )
        marks.mark("launch")
        try:
            if side is not None:
                side.start_warm()
            run = (executor or LocalExecutor()).run
            result = run(spec, line, should_cancel or (lambda: False))
            marks.mark("ran")
            if early is not None:
                early.finish()
                marks.mark("early_finished")
            out = collect_outputs(
                opts.cwd,
                opts.artifacts,
                handoff,
                log_path,
                metrics_file=opts.metrics_file,
                series=series,
                succeeded=result.status == "succeeded",
                before=before,
                one_pass=not sequential,
                objects=objects,
                early=early,
                budget=budget,
            )
        finally:
            if early is not None:
                early.close()  # staged copies not taken are dropped
        marks.mark("collected")
        if side is not None:
            side.fill(outside)
            marks.mark("side_joined")
        if places is not None:
            outside.locations = as_locations(places)
        if isinstance(store, StoreLater):
            store = store.opener()
            marks.mark("store_opened")
        blobs: dict[str, tuple[str, bytes]] = {}
        diff_sha = None
        if outside.git.diff is not None:
            diff_sha = hashlib.sha256(outside.git.diff).hexdigest()
            blobs[diff_sha] = ("diff", outside.git.diff)
        blobs.update(argv_cfg.blobs())
        manifest = build_manifest(
            run_id=run_id,
            name=opts.name,
            argv=opts.argv,
            tags=opts.tags,
            outside=outside,
            result=result,
            inside=out.inside,
            artifacts=out.artifacts,
            metrics=series,
            log_sha256=out.log_sha256,
            log_tail=out.log_tail,
            seed=opts.seed,
            image=image_info() if image_info else None,
            diff_sha256=diff_sha,
            capture=capture_info(opts),
            argv_config=argv_cfg,
            frameworks=out.frameworks,
            interpreter=None if opts.image else interpreter,
        )
        marks.mark("manifest")
        kept_log = keep_run(
            store, manifest, opts.cwd, out, locations=outside.locations, blobs=blobs
        )
        marks.mark("kept")
    marks.mark("done")
    marks.write(side, result, early)
    return RecordResult(manifest, result, kept_log, tuple(out.refused), tuple(out.unmatched))


def _check_globs(patterns: Sequence[str]) -> None:
    """Refuse, before anything runs, an artifact glob that could name something outside
    the working folder."""
    from replay_tui.door import glob_parts

    for pat in patterns:
        if glob_parts(pat) is None:
            raise BadInput(f"--artifact {pat!r} must be a relative glob inside the workdir")
