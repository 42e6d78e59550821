"""Benchmark: the runs browser at 100,000 runs.

Measures, with ``App.run_test()`` (headless, the real event loop and compositor):

- ``cold_start_s``: as a user experiences it: from starting a fresh interpreter to the
  first page of the runs table painted (the runs screen posts ``RunsPageShown`` after
  the refresh that shows it), imports included.  The child does what
  ``replay-tui --store S`` does: imports the ``replay-tui`` program, which finds no
  command in its arguments (``tui_store``) and imports the app, never the CLI; it
  reports the paint time on the system-wide monotonic clock the parent started from;
  median of several launches, with the program's bytecode cached as an installed
  program has it (``cold_start_no_bytecode_s``: compiled from source at each start, as
  with ``PYTHONDONTWRITEBYTECODE=1``, for information).  Its reference,
  ``textual_floor_s``, is a one-widget Textual app started and painted the same way,
  launched alternately with it: ``cold_start_vs_textual_floor`` is the ratio (the
  machine's speed of the day cancels out; Textual's own start is the floor).
  ``cold_start_in_process_s``
  is the same from constructing ``ReplayApp`` in a process that has already imported
  it, and ``import_s`` the imports alone (program and app) in a fresh interpreter
  (bytecode cached), with ``import_storage_s``, the part of it the store's modules take
  (``storage.store`` imported first), for information.
- ``id_part_search_keystroke_ms``: the same for the 4th to 8th key of the last 8
  characters of three runs' ids typed whole (those keys search the id trigram index too).
- ``search_keystroke_ms``: from one keystroke in the search box to the table showing
  that query's first page (``RunsPageShown`` for the new query), median over several
  searches typed one key at a time after a pause (the search fires on the first key
  and coalesces keys typed faster than its throttle window).  ``search_keystroke_cpu_ms``
  is the CPU time of the event loop's thread over the same span (the store query runs
  in a worker thread): steadier than wall time on a busy machine.

The store is built once from the realistic manifest generator in ``tests/support/factories.py``
(every group filled; metric histories cut to 20 steps to keep the build in minutes) and
cached under ``$TMPDIR/replay-tui-bench``.  Prints one JSON object.

    python bench/bench_tui.py [--runs 100000] [--searches 15] [--store PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLD_START_TARGET_S = 0.5
KEYSTROKE_TARGET_MS = 50.0
KEYSTROKE_P90_TARGET_MS = 80.0
BATCH = 2_000
SEARCHES = ("resnet", "vision", "alice", "sweep", "bert", "whisper", "cifar", "ablation")


def _sealed_batch(start: int, stop: int) -> list[tuple[str, Any]]:
    """Manifests ``start..stop`` sealed, with their gap counts (runs in a worker process)."""
    from replay_tui.gaps import gap_counts
    from storage.manifest import manifest_from_data
    from tests.support.factories import realistic_manifest

    out = []
    for i in range(start, stop):
        m = manifest_from_data(realistic_manifest(i, history_steps=20)).sealed()
        out.append((m, gap_counts(m)))
    return out


def build_store(path: Path, runs: int) -> float:
    """Create a store holding ``runs`` realistic runs; returns seconds taken."""
    from storage.store import RunStore

    t0 = time.perf_counter()
    tmp = path.with_suffix(".building")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    store = RunStore(tmp)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = [
            pool.submit(_sealed_batch, s, min(runs, s + BATCH)) for s in range(0, runs, BATCH)
        ]
        for fut in futures:
            items = [(m, gaps, (), {}) for m, gaps in fut.result()]
            store.ingest_many(items)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    tmp.rename(path)
    return time.perf_counter() - t0


def ensure_store(path: Path, runs: int) -> tuple[float | None, int]:
    from storage.store import RunStore

    built = None
    if path.exists():
        with RunStore(path) as s:
            if s.count_runs() == runs:
                return None, runs
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    built = build_store(path, runs)
    with RunStore(path) as s:
        return built, s.count_runs()


# The child side of a cold start: what ``replay-tui`` does, headless, then one line with
# the perf_counter (CLOCK_MONOTONIC, shared by every process) of the first painted page.
COLD_CHILD = """
import asyncio, sys, time
import replay_tui.program as program  # what `replay-tui --store S` runs
store = program.tui_store(["--store", sys.argv[1]])
assert store is not None and "replay_tui.cli" not in sys.modules
ReplayApp = program.import_tui().ReplayApp  # as program._open_tui does
from replay_tui.tui.messages import RunsPageShown

shown = []

class BenchApp(ReplayApp):
    def on_runs_page_shown(self, message: RunsPageShown) -> None:
        shown.append(message)

async def main() -> None:
    app = BenchApp(store)
    async with app.run_test(size=(200, 60)):
        while not shown:
            await asyncio.sleep(0.0005)
        print(shown[0].painted_at, shown[0].rows, flush=True)

asyncio.run(main())
"""

FLOOR_CHILD = """
import asyncio, time
from textual.app import App
from textual.widgets import Static

painted = []

class Floor(App):
    def compose(self):
        yield Static("one widget")

    def on_mount(self) -> None:
        self.call_after_refresh(lambda: painted.append(time.perf_counter()))

async def main() -> None:
    async with Floor().run_test(size=(200, 60)):
        while not painted:
            await asyncio.sleep(0.0005)
    print(painted[0], flush=True)

asyncio.run(main())
"""
"""The reference for the cold start: a one-widget Textual app, started and painted the
same way.  What any Textual program pays on this machine at this moment."""


def child_env(bytecode: bool) -> dict[str, str]:
    """The environment of a fresh interpreter: with ``bytecode``, as an installed program
    runs (its modules' bytecode cached, here under a private ``PYTHONPYCACHEPREFIX`` so
    the source tree gets no ``__pycache__``), whatever ``PYTHONDONTWRITEBYTECODE`` says;
    without, every module of the program is compiled from source at each start (about
    0.1 s on two cores)."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "replay-tui-bench" / "pyc")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def launch(code: str, *args: str, bytecode: bool = True) -> float:
    """Seconds from starting a new interpreter running ``code`` to the paint it reports."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        env=child_env(bytecode),
    )
    return round(float(proc.stdout.split()[0]) - t0, 4)


def cold_start_fresh_process(store: Path, launches: int, *, bytecode: bool = True) -> list[float]:
    """Seconds from starting a new interpreter to the first painted page, per launch
    (after one launch not counted, which writes the bytecode when ``bytecode``)."""
    launch(COLD_CHILD, str(store), bytecode=bytecode)
    return [launch(COLD_CHILD, str(store), bytecode=bytecode) for _ in range(launches)]


def cold_start_and_floor(store: Path, launches: int) -> tuple[list[float], list[float]]:
    """Cold starts of the program and of the one-widget floor (:data:`FLOOR_CHILD`),
    launched alternately so that both meet the machine in the same state."""
    launch(COLD_CHILD, str(store))
    launch(FLOOR_CHILD)
    app, floor = [], []
    for _ in range(launches):
        app.append(launch(COLD_CHILD, str(store)))
        floor.append(launch(FLOOR_CHILD))
    return app, floor


IMPORTS = (
    "import time; t = time.perf_counter(); import storage.store; s = time.perf_counter()\n"
    "import replay_tui.program, replay_tui.tui.app; e = time.perf_counter()\n"
    "print(e - t, s - t)"
)


def import_time() -> tuple[float, float]:
    """(program and app, the store's part of it): best of 3 fresh interpreters."""
    best = (float("inf"), float("inf"))
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", IMPORTS],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
            env=child_env(bytecode=True),
        )
        total, storage = (float(x) for x in out.stdout.split())
        best = min(best, (total, storage))
    return best


async def measure(store: Path, searches: int) -> dict[str, Any]:
    from replay_tui.tui.app import ReplayApp
    from replay_tui.tui.messages import RunsPageShown

    shown: list[RunsPageShown] = []

    cpu_at: dict[int, float] = {}

    class BenchApp(ReplayApp):
        def on_runs_page_shown(self, message: RunsPageShown) -> None:
            cpu_at[id(message)] = time.thread_time()
            shown.append(message)

    async def wait_shown(count: int, timeout: float = 30.0) -> RunsPageShown:
        deadline = time.perf_counter() + timeout
        while len(shown) < count:
            if time.perf_counter() > deadline:
                raise TimeoutError("the runs table never showed the page")
            await asyncio.sleep(0.0005)
        return shown[count - 1]

    t0 = time.perf_counter()
    app = BenchApp(store)
    async with app.run_test(size=(200, 60)) as pilot:
        first = await wait_shown(1)
        cold = first.painted_at - t0
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        total = shown[-1].total
        await pilot.press("slash")
        await pilot.pause(0.3)
        timings: list[float] = []
        cpu: list[float] = []
        rows: list[int] = []
        words = [SEARCHES[i % len(SEARCHES)] for i in range(searches)]
        for word in words:
            await pilot.press("ctrl+u")  # clear the box; that query settles first
            await pilot.pause(0.3)
            await app.workers.wait_for_complete()
            await pilot.pause(0.2)
            for ch in word[:3]:
                n = len(shown)
                t_key = time.perf_counter()
                c_key = time.thread_time()
                await pilot.press(ch)
                msg = await wait_shown(n + 1)
                timings.append((msg.painted_at - t_key) * 1000)
                cpu.append((cpu_at[id(msg)] - c_key) * 1000)
                rows.append(msg.rows)
                await pilot.pause(0.2)  # past the throttle window: the next key is a fresh one
                await app.workers.wait_for_complete()
                await pilot.pause(0.05)
        # the middle of a run's id (ids are time-ordered: the part a person remembers),
        # typed whole; keys 4-8 search the id trigram index as well as the words
        import sqlite3

        con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        ids = [r[0] for r in con.execute("SELECT id FROM runs ORDER BY random() LIMIT ?", (3,))]
        con.close()
        id_timings: list[float] = []
        for rid in ids:
            await pilot.press("ctrl+u")
            await pilot.pause(0.3)
            await app.workers.wait_for_complete()
            await pilot.pause(0.2)
            for k, ch in enumerate(rid[-8:], 1):
                n = len(shown)
                t_key = time.perf_counter()
                await pilot.press(ch)
                msg = await wait_shown(n + 1)
                if k >= 4:
                    id_timings.append((msg.painted_at - t_key) * 1000)
                await pilot.pause(0.2)
                await app.workers.wait_for_complete()
                await pilot.pause(0.05)
    return {
        "id_part_search_keystroke_ms": {
            "median": round(statistics.median(id_timings), 2),
            "p90": round(sorted(id_timings)[int(0.9 * (len(id_timings) - 1))], 2),
            "samples": len(id_timings),
        },
        "cold_start_s": round(cold, 4),
        "first_page_rows": first.rows,
        "total_runs_shown": total,
        "search_keystroke_ms": {
            "median": round(statistics.median(timings), 2),
            "p90": round(sorted(timings)[int(0.9 * (len(timings) - 1))], 2),
            "max": round(max(timings), 2),
            "samples": len(timings),
        },
        "search_keystroke_cpu_ms": {
            "median": round(statistics.median(cpu), 2),
            "p90": round(sorted(cpu)[int(0.9 * (len(cpu) - 1))], 2),
        },
        "search_rows_shown_median": int(statistics.median(rows)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--searches", type=int, default=8)
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--launches", type=int, default=5, help="fresh-process cold starts")
    args = ap.parse_args()
    store = args.store or (
        Path(tempfile.gettempdir()) / "replay-tui-bench" / f"runs-{args.runs}.db"
    )
    built_s, count = ensure_store(store, args.runs)
    load_before = os.getloadavg()[0]  # other work on the machine inflates every figure
    cold_fresh, floor = cold_start_and_floor(store, args.launches)
    cold_no_bytecode = cold_start_fresh_process(store, max(1, args.launches // 2), bytecode=False)
    imp, imp_storage = import_time()
    cold_runs = []
    result: dict[str, Any] = {}
    for _ in range(3):
        result = asyncio.run(measure(store, args.searches))
        cold_runs.append(result["cold_start_s"])
    cold = statistics.median(cold_fresh)
    ks = result["search_keystroke_ms"]["median"]
    out = {
        "benchmark": "tui_runs_browser",
        "runs_in_store": count,
        "store_bytes": store.stat().st_size,
        "store_built_s": None if built_s is None else round(built_s, 1),
        "terminal_size": [200, 60],
        "cold_start_s": round(cold, 4),
        "cold_start_launches_s": cold_fresh,
        "cold_start_target_s": COLD_START_TARGET_S,
        "cold_start_ok": cold <= COLD_START_TARGET_S,
        "textual_floor_s": round(statistics.median(floor), 4),
        "textual_floor_launches_s": floor,
        "cold_start_vs_textual_floor": round(cold / statistics.median(floor), 3),
        "cold_start_no_bytecode_s": round(statistics.median(cold_no_bytecode), 4),
        "cold_start_no_bytecode_launches_s": cold_no_bytecode,
        "cold_start_in_process_s": round(statistics.median(cold_runs), 4),
        "import_s": round(imp, 4),
        "import_storage_s": round(imp_storage, 4),
        "first_page_rows": result["first_page_rows"],
        "search_keystroke_ms": result["search_keystroke_ms"],
        "id_part_search_keystroke_ms": result["id_part_search_keystroke_ms"],
        "search_keystroke_cpu_ms": result["search_keystroke_cpu_ms"],
        "search_keystroke_target_ms": KEYSTROKE_TARGET_MS,
        "search_keystroke_p90_target_ms": KEYSTROKE_P90_TARGET_MS,
        "search_keystroke_ok": ks <= KEYSTROKE_TARGET_MS
        and result["search_keystroke_ms"]["p90"] <= KEYSTROKE_P90_TARGET_MS,
        "search_rows_shown_median": result["search_rows_shown_median"],
        "load_avg_1m_before": round(load_before, 2),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
