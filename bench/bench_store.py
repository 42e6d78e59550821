"""Benchmark the run store: ingest rate, first page of ``runs``, full-text search.

Prints one JSON object.  Manifests come from ``tests/support/factories.py`` (the same realistic
generator the tests use: ~150 packages, 100-step metric history, every group filled,
about 12 KB of canonical JSON each).  Generating the dicts is not timed; validating them
(``manifest_from_data``) is timed and reported apart from ``ingest_per_s``, which times
``RunStore.ingest_many`` alone (sealing: ``model_dump``, canonical JSON and sha256; the
rows, the full-text index and the ledger events; one transaction per batch; and the wait
for the last batch's checkpoint, which runs in a thread after each commit);
``ingest_per_cpu_s`` is the same over the process's CPU time, steadier when other work
shares the machine (with ``--profile``, where that time goes).

    python bench/bench_store.py                 # 100,000 manifests
    python bench/bench_store.py --n 5000        # quick run
    python bench/bench_store.py --n 5000 --profile   # add a cProfile summary of ingest

``ingest_split`` (on its own fresh store of ``--split`` manifests) says where ingest time
goes: sealing, the SQLite statements, and the Python between them.  Its
``ceiling_per_s_statements_alone`` is the rate the statements alone allow.

``user_paths`` (each on its own fresh store of ``--paths`` manifests) times the whole way
in as the commands take it, validation included: ``sealed_files_per_s`` is what
``replay-tui runs ingest`` does with sealed manifest files (parse the JSON bytes,
validate, check the digest, count the gaps, store), ``import_per_s`` what an importer
does with a run it has read (validate the dict, seal, store; its gap counting left out).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from storage.manifest import RunManifest, manifest_from_data  # noqa: E402
from storage.store import RunQuery, RunStore  # noqa: E402
from tests.support.factories import (  # noqa: E402
    DATASETS,
    MODELS,
    OWNERS,
    PURPOSES,
    TEAMS,
    realistic_manifest,
)

TARGET_INGEST_PER_S = 5000
TARGET_FIRST_PAGE_MS = 5.0
TARGET_FTS_MS = 20.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed_ms(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn(*args)
    return (time.perf_counter() - t0) * 1000, result


def user_paths(n: int, batch: int, seed: int) -> dict[str, Any]:
    """Validation and ingest together, as ``runs ingest`` (sealed files: its own
    ``ingest_files``, gap counts included) and an importer (unsealed runs, sealed here)
    take them; each on a fresh store, its last checkpoint included."""
    from replay_tui.cli.runs import ingest_files

    dicts = [realistic_manifest(i, seed=seed + 3) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, d in enumerate(dicts):
            path = Path(tmp) / f"{i:06d}.json"
            path.write_text(manifest_from_data(d).sealed().to_json(), encoding="utf-8")
            paths.append(path)

        def from_files(store: RunStore, some: list[Path]) -> None:
            results, errors = ingest_files(store, some)
            assert not errors and len(results) == len(some), errors[:3]

        def imported(store: RunStore, some: list[dict[str, Any]]) -> None:
            models = [manifest_from_data(d).sealed() for d in some]
            store.ingest_many([(m, None, (), {}) for m in models])

        def timed(step: Any, inputs: list[Any]) -> float:
            with tempfile.TemporaryDirectory() as tmp, RunStore(Path(tmp) / "s.db") as store:
                t0 = time.perf_counter()
                for start in range(0, n, batch):
                    step(store, inputs[start : start + batch])
                store.settle()
                return time.perf_counter() - t0

        files_s = timed(from_files, paths)
        import_s = timed(imported, dicts)
    return {
        "manifests": n,
        "sealed_files_per_s": round(n / files_s, 1),
        "import_per_s": round(n / import_s, 1),
    }


def ingest_all(store: RunStore, n: int, batch: int, seed: int) -> dict[str, Any]:
    gen_s = validate_s = ingest_s = ingest_cpu_s = 0.0
    json_bytes = 0
    for start in range(0, n, batch):
        t0 = time.perf_counter()
        dicts = [realistic_manifest(i, seed=seed) for i in range(start, min(n, start + batch))]
        t1 = time.perf_counter()
        models: list[RunManifest] = [manifest_from_data(d) for d in dicts]
        t2 = time.perf_counter()
        c2 = time.process_time()
        store.ingest_many([(m, None, (), {}) for m in models])
        t3 = time.perf_counter()
        ingest_cpu_s += time.process_time() - c2
        gen_s += t1 - t0
        validate_s += t2 - t1
        ingest_s += t3 - t2
        if start == 0:
            json_bytes = len(models[0].to_json().encode())
    t0 = time.perf_counter()
    c0 = time.process_time()
    store.settle()  # the last batch's checkpoint, which runs in a thread after its commit
    ingest_s += time.perf_counter() - t0
    ingest_cpu_s += time.process_time() - c0
    return {
        "generate_s": round(gen_s, 2),
        "validate_s": round(validate_s, 2),
        "ingest_s": round(ingest_s, 2),
        "ingest_cpu_s": round(ingest_cpu_s, 2),
        "manifest_json_bytes": json_bytes,
    }


def search_terms(store: RunStore, count: int, seed: int) -> list[str]:
    """Realistic browser searches: words of names, owners, teams, commit prefixes..."""
    rnd = random.Random(seed)
    sample = store.list_runs(RunQuery(limit=2000, offset=rnd.randrange(0, 1000)))
    words = [m.split("-")[0] for m in MODELS] + list(DATASETS) + list(PURPOSES)
    terms: list[str] = []
    terms += rnd.sample(words, 12)
    terms += rnd.sample(list(OWNERS), 4)
    terms += [f"team {t}" for t in rnd.sample(list(TEAMS), 3)]
    terms += [f"{rnd.choice(MODELS).split('-')[0]} {rnd.choice(DATASETS)}" for _ in range(6)]
    terms += [f"{rnd.choice(OWNERS)} {rnd.choice(PURPOSES)}" for _ in range(4)]
    terms += [r.commit[: rnd.choice((7, 8, 12, 40))] for r in rnd.sample(sample, 10) if r.commit]
    terms += [(r.image_digest or "")[7:19] for r in rnd.sample(sample, 4)]
    terms += [r.name for r in rnd.sample(sample, 4)]  # a whole name: every word must match
    terms += ["nosuchword", "zzz"]
    return terms[:count]


def bench_queries(store: RunStore, repeats: int, seed: int) -> dict[str, Any]:
    store.list_runs(RunQuery(limit=100))  # warm the page cache once
    first_page = [timed_ms(store.list_runs, RunQuery(limit=100))[0] for _ in range(repeats)]
    deep_page = [
        timed_ms(store.list_runs, RunQuery(limit=100, offset=50_000 if i % 2 else 1000))[0]
        for i in range(10)
    ]
    terms = search_terms(store, repeats, seed)
    fts: list[float] = []
    fts_count: list[float] = []
    per_term: list[tuple[float, str, int]] = []
    for term in terms:
        ms, rows = timed_ms(store.list_runs, RunQuery(search=term, limit=100))
        cms, total = timed_ms(store.count_runs, RunQuery(search=term))
        fts.append(ms)
        fts_count.append(cms)
        per_term.append((ms, term, total))
        assert len(rows) == min(100, total)
    slowest = sorted(per_term, reverse=True)[:3]
    return {
        "first_page_ms": round(statistics.median(first_page), 3),
        "first_page_p95_ms": round(percentile(first_page, 0.95), 3),
        "page_at_offset_ms": round(statistics.median(deep_page), 3),
        "fts_search_ms": round(statistics.median(fts), 3),
        "fts_search_p95_ms": round(percentile(fts, 0.95), 3),
        "fts_search_max_ms": round(max(fts), 3),
        "fts_count_ms": round(statistics.median(fts_count), 3),
        "fts_terms": len(terms),
        "fts_slowest": [
            {"term": t, "ms": round(ms, 2), "matches": total} for ms, t, total in slowest
        ],
    }


def profile_ingest(n: int, seed: int) -> dict[str, Any]:
    """cProfile ``ingest_many`` over ``n`` fresh manifests; the top entries by own time."""
    with tempfile.TemporaryDirectory() as tmp, RunStore(Path(tmp) / "p.db") as store:
        models = [manifest_from_data(realistic_manifest(i, seed=seed + 1)) for i in range(n)]
        prof = cProfile.Profile()
        prof.enable()
        store.ingest_many([(m, None, (), {}) for m in models])
        prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_cc, calls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, calls, f"{Path(file).name}:{line}({func})"))
    by_own = sorted(rows, reverse=True)[:12]
    by_cum = sorted(rows, key=lambda r: r[1], reverse=True)
    interesting = (
        "seal",
        "dumps_sealed",
        "dumps_data",
        "_fix_numbers",
        "_insert_many_rows",
        "_append_events",
        "sealed",
        "compute_sha256",
        "to_json",
        "canonical_json",
        "dumps",
        "model_dump",
        "model_copy",
        "body",
        "run_row",
        "execute",
        "append",
    )
    cum = [r for r in by_cum if any(f"({k})" in r[3] for k in interesting)][:12]
    return {
        "manifests": n,
        "total_s": round(total, 3),
        "per_manifest_ms": round(total / n * 1000, 3),
        "top_own_time": [
            {"fn": name, "own_s": round(tt, 3), "pct": round(100 * tt / total, 1), "calls": c}
            for tt, _ct, c, name in by_own
        ],
        "cumulative": [
            {"fn": name, "cum_s": round(ct, 3), "pct": round(100 * ct / total, 1), "calls": c}
            for _tt, ct, c, name in cum
        ],
    }


class _TimedConnection:
    """The store's connection with the time spent in its statements added up."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.seconds = 0.0

    def _timed(self, call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``call(*args)``, its time added to ``seconds``."""
        t0 = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.seconds += time.perf_counter() - t0

    def execute(self, *args: Any) -> Any:
        return self._timed(self.conn.execute, args)

    def executemany(self, *args: Any) -> Any:
        return self._timed(self.conn.executemany, args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def split_ingest(n: int, batch: int, seed: int) -> dict[str, Any]:
    """Where ingest time goes, per manifest, on a fresh store: sealing (``seal``), the
    SQLite statements (inserts, the full-text index, the ledger rows, commit), waiting for
    the previous batch's checkpoint (it runs in a thread after each commit; the last one
    is waited for at the end) and the rest (rows and events built in Python).  The
    statements alone bound the rate from above, whatever the Python side costs."""
    models = [manifest_from_data(realistic_manifest(i, seed=seed + 2)) for i in range(n)]
    seal_s = 0.0
    original = RunManifest.seal

    def timed_seal(self: RunManifest) -> tuple[str, str, str | None]:
        nonlocal seal_s
        t0 = time.perf_counter()
        try:
            return original(self)
        finally:
            seal_s += time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp, RunStore(Path(tmp) / "s.db") as store:
        timed = _TimedConnection(store.conn)
        store.conn = timed  # type: ignore[assignment]
        RunManifest.seal = timed_seal  # type: ignore[method-assign]
        checkpointer = store._checkpointer
        assert checkpointer is not None
        wait = checkpointer.wait
        wait_s = 0.0

        def timed_wait() -> None:
            nonlocal wait_s
            t0 = time.perf_counter()
            try:
                wait()
            finally:
                wait_s += time.perf_counter() - t0

        checkpointer.wait = timed_wait  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                store.ingest_many([(m, None, (), {}) for m in models[start : start + batch]])
            store.settle()
            total = time.perf_counter() - t0
        finally:
            RunManifest.seal = original  # type: ignore[method-assign]
            store.conn = timed.conn
    sql_us = timed.seconds / n * 1e6
    seal_us = seal_s / n * 1e6
    wait_us = wait_s / n * 1e6
    return {
        "manifests": n,
        "total_us": round(total / n * 1e6, 1),
        "seal_us": round(seal_us, 1),
        "sqlite_statements_us": round(sql_us, 1),
        "checkpoint_wait_us": round(wait_us, 1),
        "other_python_us": round(total / n * 1e6 - sql_us - seal_us - wait_us, 1),
        "ceiling_per_s_statements_alone": round(1e6 / sql_us, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="manifests to ingest")
    ap.add_argument("--batch", type=int, default=1000, help="manifests per transaction")
    ap.add_argument("--queries", type=int, default=50, help="repeats / distinct search terms")
    ap.add_argument("--store", type=Path, default=None, help="store file (default: temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=2000,
        default=0,
        help="also cProfile ingest_many over N manifests (default 2000)",
    )
    ap.add_argument(
        "--split",
        type=int,
        default=3000,
        help="manifests for the per-part split of ingest time (ingest_split)",
    )
    ap.add_argument(
        "--paths",
        type=int,
        default=3000,
        help="manifests for each command's whole way in (user_paths)",
    )
    args = ap.parse_args()

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        path = args.store or Path(tmp) / "store.db"
        if path.exists():
            sys.exit(f"{path} exists; the benchmark wants a fresh store")
        with RunStore(path) as store:
            ingest = ingest_all(store, args.n, args.batch, args.seed)
            runs = store.count_runs()
            queries = bench_queries(store, args.queries, args.seed)
        size = path.stat().st_size + sum(
            p.stat().st_size for p in path.parent.glob(path.name + "-wal")
        )
        conn = sqlite3.connect(path)
        sqlite_version = conn.execute("select sqlite_version()").fetchone()[0]
        conn.close()

    out: dict[str, Any] = {
        "runs": runs,
        "batch": args.batch,
        "ingest_per_s": round(args.n / ingest["ingest_s"], 1),
        "target_per_s": TARGET_INGEST_PER_S,
        "ingest_meets_target": args.n / ingest["ingest_s"] >= TARGET_INGEST_PER_S,
        "ingest_per_cpu_s": round(args.n / ingest["ingest_cpu_s"], 1),
        "validate_per_s": round(args.n / ingest["validate_s"], 1),
        "validate_and_ingest_per_s": round(args.n / (ingest["validate_s"] + ingest["ingest_s"]), 1),
        **ingest,
        "store_bytes": size,
        "store_bytes_per_run": round(size / max(1, runs)),
        **{k: v for k, v in queries.items() if k.startswith("first_page")},
        "first_page_target_ms": TARGET_FIRST_PAGE_MS,
        "page_at_offset_ms": queries["page_at_offset_ms"],
        **{k: v for k, v in queries.items() if k.startswith("fts_")},
        "fts_target_ms": TARGET_FTS_MS,
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite_version,
            "cpus": os.cpu_count(),
            "load_avg_at_start": load_at_start,
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    out["ingest_split"] = split_ingest(args.split, args.batch, args.seed)
    out["user_paths"] = user_paths(args.paths, args.batch, args.seed)
    if args.profile:
        out["profile"] = profile_ingest(args.profile, args.seed)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
