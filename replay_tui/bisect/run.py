"""``bisect GOOD BAD``: the whole experiment over the replay pipeline.

1. Load both runs, refuse what cannot be bisected (exit 2): the same run twice, a replay,
   a pair that already agrees within tolerance, an unknown ``--factors`` name.
2. Find the differing factors; mark untestable those whose inputs are not here any more
   (BAD's image not pullable, its commit or stored diff gone, a data version not kept,
   hardware), with the reason.
3. GOOD's noise floor: ``times`` replays of GOOD (an infrastructure failure here is exit
   3: nothing can be attributed without a working GOOD).
4. The search (``search``), each probe an ordinary replay (``replay_manifest`` with
   ``persist=False``: probes are not evidence about GOOD), judged against GOOD and BAD
   as recorded (``noise.judge``).
5. The answer (``verdict``), stored in the store and the ledger, with each probe's
   output (and each noise-floor replay's) as a blob the answer names (``log_sha256``,
   ``floor_logs``): ``bisect-show ID --logs`` and the TUI's ``l`` read them back.  The
   output still streams as events; the command prints it only with ``--logs``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from replay_tui.bisect import factors as fx
from replay_tui.bisect.answer import (
    BisectResult,
    DifferingFactor,
    EnvChange,
    FloorSummary,
    GoodVsBad,
    ProbeJudgement,
    ProbeRecord,
    Untestable,
    noun,
)
from replay_tui.bisect.noise import (
    MARGIN,
    Behaviour,
    Distance,
    NoiseFloor,
    compared_weight_rel_l2,
    distance,
    first_divergent_step,
    judge,
    noise_floor,
)
from replay_tui.bisect.options import DEFAULT_BUDGET as DEFAULT_BUDGET
from replay_tui.bisect.options import BisectOptions as BisectOptions
from replay_tui.bisect.options import check_factor_names as check_factor_names
from replay_tui.bisect.probe import Probe, Side, build_probe
from replay_tui.bisect.search import search
from replay_tui.errors import BadInput, InfraError, ReplayTuiError
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import OnEvent, ReplayEvent
from replay_tui.verdicts import is_reproduced
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.store import RunStore, StoreAltered, StoreError

LOG_KEPT_BYTES = 2 * 1024 * 1024
"""A probe's output kept in the store: its first and its last this many bytes."""
LOG_BLOB_KIND = "bisect-log"


class _LogKeeper:
    """One replay's output lines, its first and last ``LOG_KEPT_BYTES`` kept."""

    def __init__(self) -> None:
        from collections import deque

        self.head: list[str] = []
        self.head_bytes = 0
        self.tail: deque[str] = deque()
        self.tail_bytes = 0
        self.dropped = 0

    def add(self, line: str) -> None:
        size = len(line.encode("utf-8", "replace")) + 1
        if self.head_bytes + size <= LOG_KEPT_BYTES and not self.tail:
            self.head.append(line)
            self.head_bytes += size
            return
        self.tail.append(line)
        self.tail_bytes += size
        while self.tail_bytes > LOG_KEPT_BYTES and len(self.tail) > 1:
            gone = self.tail.popleft()
            self.tail_bytes -= len(gone.encode("utf-8", "replace")) + 1
            self.dropped += 1

    def text(self) -> str:
        cut = [f"[bisect: {self.dropped} line(s) of output not kept]"] if self.dropped else []
        lines = [*self.head, *cut, *self.tail]
        return "".join(f"{x}\n" for x in lines)


def default_times(good: RunManifest) -> int:
    """One replay for a seeded run with deterministic algorithms on, else three."""
    det = good.determinism.deterministic_algorithms
    return 1 if good.randomness.seed is not None and det else 3


def _noop(_: ReplayEvent) -> None:
    pass


def stored_replicas(store: RunStore, run_id: str) -> tuple[int, list[RunManifest]] | None:
    """The latest noise floor stored for ``run_id`` and its replicas' manifests, when at
    least two of them are still stored (a floor is checked against its ledger event when
    it is read: an altered one is refused, never reused)."""
    from replay_tui.compare.floor import stored_floor

    found = stored_floor(store, run_id)
    if found is None:
        return None
    replicas = []
    for rid in found.replicas:
        try:
            replicas.append(store.manifest(rid))
        except StoreError as e:
            if isinstance(e, StoreAltered):
                raise
            continue  # a replica no longer stored: the floor is measured anew
    return (found.fact_id, replicas) if len(replicas) >= 2 else None


def _check_origin(store: RunStore, run_ids: Sequence[str], opts: ReplayOptions) -> None:
    """A probe mixes GOOD's and BAD's commands and code under a new run id: on a backend
    without a sandbox, both runs must have been recorded on this host (or the user
    consents with ``allow_foreign_on_host``), as for a replay of either."""
    from replay_tui.replay.backends import get_backend
    from replay_tui.replay.consent import local_consent_problem

    if get_backend(opts.backend).pins_environment or getattr(opts, "allow_foreign_on_host", False):
        return
    for rid in run_ids:
        problem = local_consent_problem(store, rid)
        if problem is not None:
            raise BadInput(
                f"{problem}; the {opts.backend} backend would run bisect's probes of it the same"
                " way",
                "bisect with --backend docker (sandboxed)",
            )


# -- availability of BAD's inputs --------------------------------------------------------


def _check_code(store: RunStore, bad: Side, opts: ReplayOptions) -> str | None:
    from replay_tui.replay.checkout import find_repo

    m = bad.manifest
    if m.code.commit is None:
        return "BAD recorded no git commit"
    if m.code.dirty and m.code.diff_sha256 is None:
        return "BAD trained from uncommitted changes that were not stored"
    if m.code.diff_sha256 and m.code.dirty and store.get_blob(m.code.diff_sha256) is None:
        return f"BAD's stored diff {m.code.diff_sha256[:12]} is missing from the store"
    try:
        find_repo(
            m.code.commit,
            explicit=opts.repo,
            recorded=bad.repo,
            repo_url=m.code.repo_url,
            cache_dir=store.path.parent / "repos",
        )
    except InfraError as e:
        return f"BAD's commit is gone: {e.message}"
    return None


def _check_image(bad: Side, opts: ReplayOptions, docker_client: Any) -> str | None:
    from replay_tui.replay.backends import get_backend
    from replay_tui.replay.plan import image_reference

    backend = get_backend(opts.backend)
    if not backend.pins_environment:
        return (
            f"the {backend.name} backend runs this host's environment: it cannot swap images"
            " (use --backend docker)"
        )
    ref = image_reference(bad.manifest)
    if ref is None:
        return "BAD recorded no image digest to pull"
    problem = backend.image_problem(ref, docker_client)
    return None if problem is None else f"BAD's image is no longer available: {problem}"


def _check_topology(good: Side, bad: Side, opts: ReplayOptions) -> str | None:
    """Why the backend cannot give a probe the other run's launch topology, or None.

    A probe's topology is its launcher's options on the command line, so it can be swapped
    between two runs of the same launcher, on one machine; a backend that runs one probe
    on several nodes says so with ``multi_node`` (none does yet)."""
    from replay_tui.replay.backends import get_backend

    a, b = fx.launcher_of(list(good.manifest.argv)), fx.launcher_of(list(bad.manifest.argv))
    if a != b:

        def how(kind: str | None) -> str:
            return "directly" if kind is None else f"through {kind}"

        return (
            f"GOOD is started {how(a)} and BAD {how(b)}: the topology comes with the"
            " launcher, so a probe cannot take one without the other (the config factor"
            " swaps the whole command line, launcher included)"
        )
    for label, side in (("GOOD", good), ("BAD", bad)):
        nodes = fx.topology_of(side.manifest)["nodes"]
        if (
            isinstance(nodes, int)
            and nodes > 1
            and not getattr(get_backend(opts.backend), "multi_node", False)
        ):
            return (
                f"{label} ran on {nodes} nodes: the {opts.backend} backend runs a probe as one"
                " command on one machine, so it cannot give a probe that topology"
            )
    for label, side in (("GOOD", good), ("BAD", bad)):
        if not fx.topology_slots(list(side.manifest.argv)):
            return (
                f"{label}'s command line does not say its process counts (the launcher's"
                " default, a config file or the host decided): there is nothing to swap"
            )
    return None


def _check_data(store: RunStore, good: Side, bad: Side) -> str | None:
    from replay_tui.capture.hashing import StatCache, hash_path

    locs = bad.data_locations()
    same = {(d.name, d.sha256) for d in good.manifest.data}
    problems = []
    with StatCache(store.path.parent / "hashcache.db") as cache:
        for d in bad.manifest.data:
            if (d.name, d.sha256) in same:
                continue
            where = locs.get(d.name)
            if where is None:
                problems.append(f"data {d.name!r}: this host has no record of where BAD's is")
                continue
            p = Path(where)
            if not p.exists():
                problems.append(f"data {d.name!r}: BAD's version at {p} was not kept")
                continue
            try:
                got = hash_path(p, cache=cache).sha256
            except (ValueError, OSError, RuntimeError) as e:
                problems.append(f"data {d.name!r}: cannot hash {p}: {e}")
                continue
            if got != d.sha256:
                problems.append(
                    f"data {d.name!r}: {p} has changed since BAD ran (sha256 {got[:12]},"
                    f" recorded {str(d.sha256)[:12]}): that version was not kept"
                )
    return "; ".join(problems) or None


# -- the experiment ------------------------------------------------------------------------


class _Runner:
    """Runs probes through the replay pipeline and judges them."""

    def __init__(
        self,
        store: RunStore,
        good: Side,
        bad: Side,
        opts: BisectOptions,
        on_event: OnEvent,
        should_cancel: Callable[[], bool],
        docker_client: Any,
        result: BisectResult,
    ) -> None:
        from replay_tui.compare.comparison import DEFAULT_ATOL, DEFAULT_RTOL

        self.store = store
        self.good, self.bad = good, bad
        self.opts = opts
        self.on_event = on_event
        self.should_cancel = should_cancel
        self.docker_client = docker_client
        self.result = result
        self.objects = ObjectStore.beside(store.path)
        self.rtol = DEFAULT_RTOL if opts.rtol is None else opts.rtol
        self.atol = DEFAULT_ATOL if opts.atol is None else opts.atol
        self.floor: NoiseFloor | None = None
        self.prefetched: dict[tuple[frozenset[str], str], Behaviour] = {}
        self._lock = threading.Lock()

    def note(self, message: str) -> None:
        self.on_event(ReplayEvent("bisect", "note", message))

    def replay(
        self, probe: Probe, store: RunStore | None = None, log: _LogKeeper | None = None
    ) -> RunManifest:
        from replay_tui.replay.runner import replay_manifest

        def on_event(ev: ReplayEvent) -> None:
            if log is not None and ev.state == "log":
                log.add(ev.message)
            self.on_event(ev)

        options = self.opts.replay
        if options.repo is None and probe.code_repo is not None and probe.code_repo.exists():
            options = dataclasses.replace(options, repo=probe.code_repo)
        outcome = replay_manifest(
            store or self.store,
            probe.manifest,
            options,
            data_locations=probe.data_locations,
            repo_location=probe.repo_location,
            on_event=on_event,
            should_cancel=self.should_cancel,
            docker_client=self.docker_client,
            persist=False,
        )
        if outcome.replay is None:
            raise InfraError(f"the probe left no replay manifest: {outcome.reason}")
        return outcome.replay

    def baseline(self, times: int) -> NoiseFloor:
        replicas = []
        for i in range(times):
            self.on_event(
                ReplayEvent("bisect", "start", f"noise floor: replay {i + 1} of {times} of GOOD")
            )
            probe = build_probe(self.good, self.bad, (), "good")
            log = _LogKeeper()
            try:
                rm = self.replay(probe, log=log)
            except ReplayTuiError as e:
                raise InfraError(
                    f"GOOD cannot be replayed here, so nothing can be attributed: {e.message}",
                    e.hint,
                ) from None
            if rm.status != "succeeded" and self.good.manifest.status == "succeeded":
                tail = (rm.outputs.log_tail or "").strip().splitlines()[-3:]
                raise InfraError(
                    f"GOOD's replay here did not succeed ({rm.status}, exit code"
                    f" {rm.exit_code}), so nothing can be attributed"
                    + (": " + " | ".join(tail) if tail else ""),
                    "replay GOOD on its own (replay-tui replay) to see why",
                )
            replicas.append(rm)
            self.result.floor_log_texts.append(log.text())
            if self.should_cancel():
                raise KeyboardInterrupt
        return noise_floor(self.good.manifest, replicas, self.objects, self.bad.manifest)

    def probe(self, swapped: frozenset[str], base: str, why: str) -> Behaviour:
        """Run one probe (or take the result of one run ahead in parallel)."""
        if self.should_cancel():
            raise KeyboardInterrupt
        done = self.prefetched.pop((swapped, base), None)
        if done is not None:
            return done
        return self._execute(self._record(swapped, base, why), self.store)

    def prefetch(self, keys: Sequence[tuple[frozenset[str], str, str]], workers: int) -> None:
        """Run these probes ahead, ``workers`` at a time (each thread its own store
        connection); ``probe`` then answers them from here, in the search's order."""
        from concurrent.futures import ThreadPoolExecutor

        recs = [self._record(s, b, why) for s, b, why in keys]

        def task(rec: ProbeRecord) -> Behaviour:
            with RunStore(self.store.path) as store:
                return self._execute(rec, store)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            for (s, b, _), behaves in zip(keys, pool.map(task, recs), strict=True):
                self.prefetched[(s, b)] = behaves

    def _record(self, swapped: frozenset[str], base: str, why: str) -> ProbeRecord:
        with self._lock:
            rec = ProbeRecord(
                len(self.result.probes) + 1, base, [f for f in fx.FACTORS if f in swapped], why
            )
            self.result.probes.append(rec)
        return rec

    def _execute(self, rec: ProbeRecord, store: RunStore) -> Behaviour:
        if self.should_cancel():
            raise KeyboardInterrupt
        assert self.floor is not None
        base, why, swapped = rec.base, rec.why, frozenset(rec.swapped)
        side = "GOOD" if base == "good" else "BAD"
        donor = "BAD" if base == "good" else "GOOD"
        self.on_event(
            ReplayEvent(
                "bisect",
                "start",
                f"probe {rec.index}: {side} with {donor}'s {' + '.join(rec.swapped)} ({why})",
            )
        )
        t0 = time.monotonic()
        b, d = (self.good, self.bad) if base == "good" else (self.bad, self.good)
        log = _LogKeeper()
        try:
            rm = self.replay(build_probe(b, d, swapped, base), store, log)
        except ReplayTuiError as e:
            rec.behaves, rec.error, rec.status = "failed", e.message, "error"
            rec.duration_s = time.monotonic() - t0
            rec.log = log.text() or None
            self.on_event(ReplayEvent("bisect", "done", f"probe {rec.index}: error: {e.message}"))
            return "failed"
        j = judge(
            rm,
            self.good.manifest,
            self.bad.manifest,
            self.floor,
            self.objects,
            rtol=self.rtol,
            atol=self.atol,
        )
        rec.behaves = j.behaves
        rec.judgement = ProbeJudgement(
            j.vs_good, j.vs_bad, j.first_divergent_step, j.d_good, j.d_bad, j.near_good, j.near_bad
        )
        rec.replay_run, rec.status = rm.run_id, rm.status
        rec.duration_s = time.monotonic() - t0
        rec.log = log.text()
        self.on_event(ReplayEvent("bisect", "done", f"probe {rec.index}: behaves like {j.behaves}"))
        return j.behaves


def _env_diff(good: RunManifest, bad: RunManifest, blamed: Sequence[str]) -> list[EnvChange]:
    """What differs inside the blamed factors, GOOD -> BAD (packages for an image)."""
    from replay_tui.compare.environment import compare_environment

    rows: list[EnvChange] = []
    if "image" in blamed:
        ga, gb = good.image, bad.image
        rows.append(
            EnvChange("image", "image", ga.reference if ga else None, gb.reference if gb else None)
        )
        ea, eb = good.environment, bad.environment
        for k in ("python_version", "torch_version", "cuda_version", "cudnn_version", "os"):
            if getattr(ea, k) != getattr(eb, k):
                rows.append(EnvChange("image", k, getattr(ea, k), getattr(eb, k)))
        from replay_tui.compare.environment import compare_packages

        pk = compare_packages(good, bad)
        if pk is None:
            rows.append(EnvChange("image", "packages", "not recorded", "-"))
        elif pk.same:
            rows.append(
                EnvChange(
                    "image",
                    "packages",
                    f"{pk.count_a} packages",
                    "the same list: the difference is elsewhere in the image"
                    " (files, start-up hooks, libraries outside pip)",
                )
            )
        else:
            for n, va, vb in pk.changed:
                rows.append(EnvChange("image", f"package {n}", va, vb))
            for n in pk.added:
                rows.append(EnvChange("image", f"package {n}", "-", "added"))
            for n in pk.removed:
                rows.append(EnvChange("image", f"package {n}", "present", "-"))
    prefixes = {
        "code": ("code.",),
        "data": ("data",),
        "config": ("argv", "workdir", "config."),
        "topology": ("launch",),
        "seed": ("env.REPLAY_TUI_SEED", "env.PYTHONHASHSEED", "randomness."),
        "determinism": (*(f"env.{k}" for k in sorted(fx.DETERMINISM_ENV)), "determinism."),
        "environment": ("env.",),
    }
    env = compare_environment(good, bad)
    for f in blamed:
        if f == "image":
            continue
        for r in env.differing():
            if r.cls == "expected" or not r.path.startswith(prefixes.get(f, ())):
                continue
            if f == "environment" and r.path[4:] in fx.SEED_ENV | fx.DETERMINISM_ENV:
                continue
            rows.append(EnvChange(f, r.path, r.a, r.b))
    return rows


def run_bisect(
    store: RunStore,
    good_ref: str,
    bad_ref: str,
    opts: BisectOptions,
    *,
    on_event: OnEvent = _noop,
    should_cancel: Callable[[], bool] = lambda: False,
    docker_client: Any = None,
    persist: bool = True,
) -> BisectResult:
    """Bisect GOOD against BAD (module doc); stored unless ``persist`` is False."""

    t0 = time.monotonic()
    if opts.budget < 1:
        raise BadInput(f"--budget must be at least 1 (got {opts.budget})")
    only = check_factor_names(opts.factors) if opts.factors is not None else None
    gid, bid = store.resolve(good_ref), store.resolve(bad_ref)
    if gid == bid:
        raise BadInput("GOOD and BAD are the same run: give two different runs")
    good_m, bad_m = store.manifest(gid), store.manifest(bid)
    for label, m in (("GOOD", good_m), ("BAD", bad_m)):
        if m.kind != "original":
            raise BadInput(
                f"{label} ({m.run_id}) is a replay; bisect two original runs"
                f" (this one replays {m.replay_of})"
            )
    _check_origin(store, (gid, bid), opts.replay)
    good = Side(good_m, tuple(store.locations(gid)))
    bad = Side(bad_m, tuple(store.locations(bid)))
    res = BisectResult(gid, bid, opts.replay.backend, budget=opts.budget)
    runner = _Runner(store, good, bad, opts, on_event, should_cancel, docker_client, res)
    rtol, atol = runner.rtol, runner.atol
    objects = runner.objects
    from replay_tui.replay.runner import compare_pair

    # GOOD against BAD as every command judges a pair: with GOOD's stored noise floor,
    # when there is one (BAD within GOOD's own noise has nothing to explain)
    tol = dataclasses.replace(opts.replay.tolerance, rtol=rtol, atol=atol)
    gb_cmp = compare_pair(store, good_m, bad_m, tol)
    gb_dist = distance(good_m, bad_m, objects)
    seen_l2 = compared_weight_rel_l2(gb_cmp)  # the number `compare` of the pair says
    if seen_l2 is not None and seen_l2 > gb_dist.weight_rel_l2:
        gb_dist = Distance(gb_dist.metric_gap, seen_l2)
    step = first_divergent_step(gb_cmp)
    at_step = [m for m in gb_cmp.metrics if not m.timing and m.first_step_differs == step]
    metric = max(at_step, key=lambda m: m.steps_compared).name if at_step else None
    res.good_bad = GoodVsBad(gb_cmp.verdict, gb_dist, step, metric)
    if is_reproduced(gb_cmp.verdict) and good_m.status == bad_m.status:
        raise BadInput(
            f"GOOD and BAD agree ({gb_cmp.verdict} within rtol={rtol:g}, atol={atol:g}"
            + (", and GOOD's noise floor" if gb_cmp.noise is not None else "")
            + "): there is no divergence to explain"
        )

    # factors and what can be tested here
    rep = fx.diff_factors(good_m, bad_m)
    res.notes.extend(rep.notes)
    if only is not None:
        for f in rep.differing:
            if f.name not in only and f.testable:
                rep.mark_untestable(f.name, "left out with --factors (held at GOOD's value)")
    tested = set(rep.testable)
    checks: dict[str, Callable[[], str | None]] = {
        "code": lambda: _check_code(store, bad, opts.replay),
        "image": lambda: _check_image(bad, opts.replay, docker_client),
        "data": lambda: _check_data(store, good, bad),
        "topology": lambda: _check_topology(good, bad, opts.replay),
    }
    for name, check in checks.items():
        if name in tested:
            runner.note(
                f"checking that BAD's {noun(name)} is available"
                if name != "topology"
                else f"checking that the {opts.replay.backend} backend can give BAD's topology"
            )
            why = check()
            if why:
                rep.mark_untestable(name, why)
    res.factors = [
        DifferingFactor(f.name, tuple(f.detail), f.testable, f.reason) for f in rep.differing
    ]
    res.untestable = [Untestable(f.name, f.reason) for f in rep.untestable]
    if not rep.differing:
        raise BadInput(
            "GOOD and BAD differ in their outputs but in none of the recorded factors"
            " (code, image, data, config, topology, seed, determinism, environment,"
            " hardware)",
            "replay GOOD with --times N: the run is probably not reproducible",
        )

    # GOOD's noise floor
    times = opts.times if opts.times is not None else default_times(good_m)
    kept = stored_replicas(store, gid) if opts.times is None and times > 1 else None
    if kept is not None:  # GOOD's stored floor: its replicas are GOOD's noise already
        fid, replicas = kept
        reused = (
            f"GOOD's noise floor: stored floor #{fid} over {len(replicas)} replicas"
            " (no replays of GOOD for it; --times N measures a new one)"
        )
        runner.note(reused)
        res.notes.append(reused)
        times = len(replicas)
        floor = noise_floor(good_m, replicas, objects, bad_m)
    else:
        floor = runner.baseline(times)
    res.times = times
    runner.floor = floor
    res.noise_floor = FloorSummary(floor.runs, floor.floor, floor.identical)
    if not gb_dist.beyond(floor.floor, MARGIN) and good_m.status == bad_m.status:
        res.outcome = "unexplained"
        res.reason = (
            "the run is not reproducible enough to attribute: GOOD's noise floor over"
            f" {floor.runs} runs (metric gap {floor.floor.metric_gap:.3g}, weight rel L2"
            f" {floor.floor.weight_rel_l2:.3g}) is not clearly below the GOOD/BAD difference"
            f" (metric gap {gb_dist.metric_gap:.3g}, weight rel L2"
            f" {gb_dist.weight_rel_l2:.3g}; {MARGIN:g}x the floor needed)"
        )
        return _finish(store, res, t0, persist)

    testable = rep.testable
    if not testable:
        res.reason = "no factor that differs can be tested here: " + "; ".join(
            f"{u.factor} ({u.reason})" for u in res.untestable
        )
        return _finish(store, res, t0, persist)
    blocked = [f.name for f in rep.untestable if f.name in ("code", "image", "data")]
    if opts.parallel > 1 and len(testable) > 1:
        runner.prefetch(
            [
                (frozenset([f]), "good", f"one factor at a time: {f} alone")
                for f in testable[: opts.budget]
            ],
            opts.parallel,
        )
    sr = search(testable, runner.probe, budget=opts.budget, confirm=not blocked)
    if blocked and sr.causes:
        res.notes.append(
            "confirmation (BAD with GOOD's causes) not run: BAD's "
            + ", ".join(noun(b) for b in blocked)
            + " cannot be replayed here"
        )
    res.causes, res.cleared, res.partial = sr.causes, sr.cleared, sr.partial
    res.confirmed, res.interaction = sr.confirmed, sr.interaction and len(sr.causes) > 1
    res.budget_exhausted = sr.budget_exhausted
    if sr.causes:
        res.outcome = "cause"
        res.env_diff = _env_diff(good_m, bad_m, sr.causes)
    else:
        res.outcome = "unexplained"
        untestable = ", ".join(f"{u.factor} ({u.reason})" for u in res.untestable)
        if sr.budget_exhausted:
            res.reason = f"the probe budget ({opts.budget}) ran out before an answer"
            if sr.narrowed_to:
                res.reason += "; the cause is within " + ", ".join(sr.narrowed_to)
        else:
            res.reason = (
                "GOOD with BAD's "
                + " + ".join(noun(t) for t in testable)
                + " does not behave like BAD"
            )
            if untestable:
                res.reason += f"; what could not be tested remains: {untestable}"
    return _finish(store, res, t0, persist)


def _keep_logs(store: RunStore, res: BisectResult) -> None:
    """Each probe's output and each noise-floor replay's as a blob the answer names."""

    def put(text: str) -> str:
        return store.put_blob(text.encode("utf-8", "replace"), LOG_BLOB_KIND, res.bad)

    res.floor_logs = [put(t) for t in res.floor_log_texts]
    for p in res.probes:
        if p.log is not None:
            p.log_sha256 = put(p.log)


def probe_log(store: RunStore, result: BisectResult, which: int) -> str | None:
    """The output a stored bisect kept of probe ``which`` (its number in the table), or
    with ``which`` < 0 of GOOD's noise-floor replay ``-which``; None when none was kept.
    Untrusted text (the program's output): escape it before it meets a terminal."""
    if which < 0:
        shas = result.floor_logs
        sha = shas[-which - 1] if -which <= len(shas) else None
    else:
        sha = next((p.log_sha256 for p in result.probes if p.index == which), None)
    if sha is None:
        return None
    data = store.get_blob(sha)
    return None if data is None else data.decode("utf-8", "replace")


def stored_bisect(store: RunStore, bisect_id: int) -> BisectResult:
    """Bisect ``bisect_id`` as the store holds it (its body checked against the ledger
    as every read of a bisect is); BadInput when there is none."""
    from storage.readmodel import bisect_bad_run

    bad = bisect_bad_run(store, bisect_id)
    if bad is None:
        raise BadInput(f"no bisect #{bisect_id} in this store")
    for fact in store.bisects_of(bad):
        if fact["id"] == bisect_id:
            res = BisectResult.from_dict(fact["body"])
            res.bisect_id = bisect_id
            return res
    raise BadInput(f"no bisect #{bisect_id} in this store")


def _finish(store: RunStore, res: BisectResult, t0: float, persist: bool) -> BisectResult:
    res.duration_s = time.monotonic() - t0
    if persist:
        _keep_logs(store, res)
        res.bisect_id = store.add_bisect(res.good, res.bad, res.outcome, res.causes, res.to_dict())
    return res
