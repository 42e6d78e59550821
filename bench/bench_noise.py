"""Benchmark: what judging a replay against a stored noise floor costs beside a plain compare.

Builds, in a temp dir, a real store (``RunStore``, objects beside it) holding an original
run, K replicas (kind replay, ``replay_of`` the original) and one candidate replay.  Each
run has its own checkpoint of ``--size-mb`` MiB of float32 tensors (``--tensors`` of them,
safetensors, written chunk by chunk from a seeded torch generator so memory stays
bounded): the original's tensors, plus for every replay small independent noise (relative
``--noise``, far beyond the default rtol 1e-5).  Each checkpoint is put into the object
store by sha256 and listed as a ``checkpoint`` artifact; each run also has a ``loss`` and
``accuracy`` history (``--steps`` points) and final metrics with a small per-run noise.
So a plain compare of original and candidate reads DIVERGED, and the judgement against
the replicas' floor reads WITHIN_NOISE (both asserted; an ``error`` field says otherwise).

Then, interleaved over ``--rounds`` rounds, each a fresh call in this process with the
page cache warm (every checkpoint was read once before the first round), it times:

- ``plain``: ``compare_runs(original, candidate, objects=..., rtol, atol)`` without a
  floor, what every replay already pays (one checkpoint comparison);
- ``floor``: ``measure_floor(replicas, objects, tolerance)``, paid once per floor
  (K(K-1)/2 checkpoint comparisons);
- ``judge``: ``compare_pair(store, original, candidate, tolerance)`` with the floor stored:
  the plain compare, plus ``noise_context`` (the floor read back) and, since the pair is
  beyond the tolerance, the judgement: the candidate's K weight distances to the replicas
  and the rule;
- and, to say where the time goes: ``checkpoint`` (one bare ``compare_checkpoints`` of the
  two files), ``noise_context`` alone (no checkpoint is read until a judgement needs the
  distances), ``floor_read`` (``stored_floor``) and ``rule`` (``noise_rule.judge`` on the
  distances worked out once).

Prints one JSON object: min and median of each, the ratios judge/plain and floor/plain,
the verdicts seen and the machine.  No timing thresholds.

    python bench/bench_noise.py                          # 1 GiB checkpoints, K=3
    python bench/bench_noise.py --size-mb 64 --rounds 2  # quick smoke run
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from replay_tui.compare.comparison import compare_runs  # noqa: E402
from replay_tui.compare.floor import (  # noqa: E402
    floor_body,
    measure_floor,
    noise_context,
    stored_floor,
)
from replay_tui.compare.noise_rule import judge as noise_judge  # noqa: E402
from replay_tui.compare.tensors import compare_checkpoints  # noqa: E402
from replay_tui.compare.tolerance import Tolerance  # noqa: E402
from replay_tui.replay.runner import compare_pair  # noqa: E402
from storage.manifest import RunManifest, manifest_from_data  # noqa: E402
from storage.objects import ObjectStore  # noqa: E402
from storage.store import RunStore  # noqa: E402
from tests.support.factories import EPOCH, realistic_manifest, timestamp, ulid  # noqa: E402

COLS = 1024
"""Each tensor is ``[rows, COLS]`` float32."""
CHUNK_ELEMS = 4 << 20
"""Elements generated and written at a time (16 MiB of float32)."""
CKPT_PATH = "checkpoints/final.safetensors"
SEED = 20250301


# -- checkpoints -----------------------------------------------------------------------------


def _seed(run: int, tensor: int, chunk: int) -> int:
    """A distinct generator seed per (run, tensor, chunk); run -1 is the shared base."""
    return SEED + (run + 1) * 100_000_000 + tensor * 100_000 + chunk


def write_checkpoint(
    path: Path, run: int | None, n_tensors: int, rows: int, noise: float
) -> tuple[str, int]:
    """Write a safetensors file of ``n_tensors`` ``[rows, COLS]`` float32 tensors: the base
    tensors (the original's), plus for ``run`` (a replay) ``noise * randn`` of its own.
    Written by hand, chunk by chunk, so no tensor is ever whole in memory.  Returns the
    file's sha256 and size."""
    import torch

    if sys.byteorder != "little":
        raise SystemExit("safetensors data is little-endian; this writer assumes the host is")
    numel = rows * COLS
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "bench": "bench_noise"}}
    offset = 0
    names = [f"layers.{t:02d}.weight" for t in range(n_tensors)]
    for name in names:
        header[name] = {
            "dtype": "F32",
            "shape": [rows, COLS],
            "data_offsets": [offset, offset + numel * 4],
        }
        offset += numel * 4
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    h = hashlib.sha256()
    gen = torch.Generator()
    with path.open("wb") as f:
        for piece in (struct.pack("<Q", len(raw)), raw):
            f.write(piece)
            h.update(piece)
        for t in range(n_tensors):
            for c, start in enumerate(range(0, numel, CHUNK_ELEMS)):
                n = min(CHUNK_ELEMS, numel - start)
                x = torch.randn(n, generator=gen.manual_seed(_seed(-1, t, c)))
                if run is not None:
                    eps = torch.randn(n, generator=gen.manual_seed(_seed(run, t, c)))
                    x.add_(eps, alpha=noise)
                buf = memoryview(x.numpy()).cast("B")
                f.write(buf)
                h.update(buf)
    return h.hexdigest(), path.stat().st_size


# -- manifests -------------------------------------------------------------------------------


def _history(base: list[float], rnd: Any, sigma: float) -> list[list[float]]:
    return [[(k + 1) * 10, v * (1 + sigma * rnd.gauss(0, 1))] for k, v in enumerate(base)]


def build_manifest(
    template: dict[str, Any],
    index: int,
    *,
    kind: str,
    replay_of: str | None,
    sha256: str,
    size: int,
    steps: int,
    metric_noise: float,
) -> dict[str, Any]:
    """One run of the family: ``template``'s recording (same code, image, config), its own
    id, its checkpoint, and metrics that are the shared curve times ``1 + noise``."""
    import random

    rnd = random.Random(SEED + 7919 * index)
    d = copy.deepcopy(template)
    started = EPOCH + timedelta(hours=index)
    d["run_id"] = ulid(int(started.timestamp() * 1000), rnd)
    d["started_at"] = timestamp(started)
    d["ended_at"] = timestamp(started + timedelta(seconds=float(d["duration_s"])))
    d["kind"] = kind
    d["replay_of"] = replay_of
    d["replay"] = {"backend": "local", "environment_pinned": True} if kind == "replay" else None
    base_rnd = random.Random(SEED)  # the curve all runs share
    loss = [
        2.0 + 4.5 * (1 - k / (steps - 1)) ** 2 + 0.02 * base_rnd.gauss(0, 1) for k in range(steps)
    ]
    acc = [0.05 + 0.8 * (1 - (1 - k / (steps - 1)) ** 2) for k in range(steps)]
    loss_h = _history(loss, rnd, metric_noise)
    acc_h = _history(acc, rnd, metric_noise)
    d["outputs"]["artifacts"] = [
        {"path": CKPT_PATH, "sha256": sha256, "size_bytes": size, "kind": "checkpoint"},
    ]
    d["outputs"]["metric_history"] = {"loss": loss_h, "accuracy": acc_h}
    d["outputs"]["metrics"] = {
        "loss": loss_h[-1][1],
        "accuracy": acc_h[-1][1],
        "val_loss": (loss[-1] + 0.15) * (1 + metric_noise * rnd.gauss(0, 1)),
        "throughput_samples_s": round(rnd.uniform(9_000, 11_000), 2),  # timing: not judged
    }
    d["outputs"]["log_tail"] = f"step {steps * 10} loss {loss_h[-1][1]:.4f}\ntraining finished\n"
    return d


def build_store(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The store with original, K replicas and the candidate, their checkpoints in the
    object store.  Returns the run ids, the checkpoint size and how long building took."""
    import torch

    t0 = time.perf_counter()
    rows = max(1, (args.size_mb << 20) // 4 // args.tensors // COLS)
    objects = ObjectStore.beside(folder / "store.db")
    staging = folder / "staging.safetensors"
    template = realistic_manifest(0, seed=SEED, history_steps=2)
    template["tags"] = {**template["tags"], "purpose": "bench-noise"}
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # generation only; restored below
    specs: list[tuple[str, int | None]] = [("original", None)]
    specs += [("replica", i) for i in range(args.k)] + [("candidate", args.k)]
    ids: dict[str, Any] = {"replicas": []}
    size = 0
    try:
        with RunStore(folder / "store.db") as store:
            original_id: str | None = None
            for index, (role, run) in enumerate(specs):
                sha, size = write_checkpoint(staging, run, args.tensors, rows, args.noise)
                objects.put(staging, sha)
                staging.unlink()
                d = build_manifest(
                    template,
                    index,
                    kind="original" if role == "original" else "replay",
                    replay_of=original_id,
                    sha256=sha,
                    size=size,
                    steps=args.steps,
                    metric_noise=args.metric_noise,
                )
                store.ingest(manifest_from_data(d, source=f"bench:{role}"))
                if role == "original":
                    original_id = d["run_id"]
                    ids["original"] = original_id
                elif role == "replica":
                    ids["replicas"].append(d["run_id"])
                else:
                    ids["candidate"] = d["run_id"]
            store.settle()
    finally:
        torch.set_num_threads(threads)
        staging.unlink(missing_ok=True)
    os.sync()  # dirty pages being written back would slow the timed reads
    return {
        **ids,
        "rows": rows,
        "checkpoint_bytes": size,
        "build_s": round(time.perf_counter() - t0, 2),
    }


# -- timing ----------------------------------------------------------------------------------


def interleaved(rounds: int, funcs: dict[str, Callable[[], object]]) -> dict[str, Any]:
    """Wall and CPU seconds of each function, called once per round in turn, so every
    function sees the same load on a shared host."""
    wall: dict[str, list[float]] = {k: [] for k in funcs}
    cpu: dict[str, list[float]] = {k: [] for k in funcs}
    for _ in range(rounds):
        for name, fn in funcs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {
        name: {
            "min_s": round(min(wall[name]), 4),
            "median_s": round(statistics.median(wall[name]), 4),
            "cpu_min_s": round(min(cpu[name]), 4),
            "all_s": [round(x, 4) for x in wall[name]],
        }
        for name in funcs
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b > 0 else None


def run_bench(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    built = build_store(folder, args)
    tol = Tolerance()
    store_path = folder / "store.db"
    objects = ObjectStore.beside(store_path)
    errors: list[str] = []
    with RunStore(store_path) as store:
        original = store.manifest(built["original"])
        candidate = store.manifest(built["candidate"])
        replicas: list[RunManifest] = [store.manifest(r) for r in built["replicas"]]
        a_path = objects.get(original.outputs.artifacts[0].sha256 or "")
        b_path = objects.get(candidate.outputs.artifacts[0].sha256 or "")
        assert a_path is not None and b_path is not None

        def plain() -> str:
            return compare_runs(
                original, candidate, objects=objects, rtol=tol.rtol, atol=tol.atol
            ).verdict

        def floor() -> object:
            return measure_floor(replicas, objects, tol)

        # warm-up, untimed: reads every checkpoint once (page cache warm from here on),
        # checks the answers, and stores the floor as ``replay --times K`` does
        t0 = time.perf_counter()
        plain_verdict = plain()
        measured, check = measure_floor(replicas, objects, tol)
        fid = store.add_noise_floor(
            original.run_id, len(replicas), floor_body(measured, check, tol, original.run_id)
        )
        judged = compare_pair(store, original, candidate, tol)
        warm_s = time.perf_counter() - t0
        ctx = noise_context(store, original, candidate, tol)
        if plain_verdict != "DIVERGED":
            errors.append(f"plain compare read {plain_verdict}, expected DIVERGED")
        if judged.verdict != "WITHIN_NOISE":
            why = "; ".join(judged.reasons[:4])
            errors.append(f"judged compare read {judged.verdict}, expected WITHIN_NOISE: {why}")
        if ctx is None or ctx.candidate != "b" or ctx.weights is None:
            errors.append("noise_context did not find the floor with weights for candidate b")
        dist = ctx.weights(candidate) if ctx is not None and ctx.weights is not None else None

        def judge() -> str:
            return compare_pair(store, original, candidate, tol).verdict

        def context() -> object:
            return noise_context(store, original, candidate, tol)

        def rule() -> object:
            assert ctx is not None
            return noise_judge(
                ctx.stored.floor,
                dict(candidate.outputs.metric_history),
                dict(candidate.outputs.metrics),
                ctx.params,
                dist,
            )

        def floor_read() -> object:
            return stored_floor(store, original.run_id)

        def checkpoint() -> object:
            return compare_checkpoints(a_path, b_path, rtol=tol.rtol, atol=tol.atol)

        times = interleaved(
            args.rounds,
            {
                "plain": plain,
                "checkpoint": checkpoint,
                "floor": floor,
                "noise_context": context,
                "judge": judge,
                "rule": rule if ctx is not None else lambda: None,
                "floor_read": floor_read,
            },
        )
        plain_after, judged_after = plain(), judge()  # the answers did not change
        if (plain_after, judged_after) != (plain_verdict, judged.verdict):
            errors.append(f"verdicts changed while timing: {plain_after}, {judged_after}")

    k = args.k
    comparisons = {
        "plain": 1,
        "checkpoint": 1,
        "floor": k * (k - 1) // 2,
        "noise_context": 0,
        "judge": 1 + k,
        "rule": 0,
        "floor_read": 0,
    }
    # on a shared host the minimum is the steadier estimate of what a call costs
    unit = times["checkpoint"]["min_s"]
    for name, row in times.items():
        row["checkpoint_comparisons"] = comparisons[name]
        if comparisons[name]:
            row["explained_by_checkpoint_compares"] = round(
                comparisons[name] * unit / row["min_s"], 3
            )
    med = {name: row["median_s"] for name, row in times.items()}
    low = {name: row["min_s"] for name, row in times.items()}
    cpu = {name: row["cpu_min_s"] for name, row in times.items()}
    nbytes = int(built["checkpoint_bytes"])
    j = judged.noise
    weights = j.weights.to_dict() if j is not None else None
    out: dict[str, Any] = {
        "bench": "noise",
        "size_mb": args.size_mb,
        "checkpoint_bytes": nbytes,
        "tensors": args.tensors,
        "tensor_shape": [built["rows"], COLS],
        "dtype": "float32",
        "format": "safetensors",
        "k": k,
        "rounds": args.rounds,
        "weight_noise_rel": args.noise,
        "metric_noise_rel": args.metric_noise,
        "history_steps": args.steps,
        "tolerance": tol.to_dict(),
        "page_cache": (
            "warm: every checkpoint was read by an untimed warm-up before the rounds; each"
            " timed call is a fresh call in this process (no result reused), so times are"
            " memory and CPU, not disk"
        ),
        "times": times,
        "ratio_judge_vs_plain": _ratio(med["judge"], med["plain"]),
        "ratio_floor_vs_plain": _ratio(med["floor"], med["plain"]),
        "ratio_judge_vs_plain_min": _ratio(low["judge"], low["plain"]),
        "ratio_floor_vs_plain_min": _ratio(low["floor"], low["plain"]),
        "ratio_judge_vs_plain_cpu": _ratio(cpu["judge"], cpu["plain"]),
        "ratio_floor_vs_plain_cpu": _ratio(cpu["floor"], cpu["plain"]),
        "judge_extra_s": round(med["judge"] - med["plain"], 4),
        "judge_extra_min_s": round(low["judge"] - low["plain"], 4),
        "judge_beyond_checkpoint_compares_min_s": round(low["judge"] - (1 + k) * unit, 4),
        "plain_read_gbps": round(2 * nbytes / low["plain"] / 1e9, 2),
        "verdicts": {
            "plain": plain_verdict,
            "judged": judged.verdict,
            "noise_status": j.status if j is not None else None,
            "noise_tests": j.tests if j is not None else None,
            "weights": weights,
            "floor_fact": fid,
            "floor_weights_pairwise": list(measured.weights_pairwise or ()),
        },
        "note": (
            "checkpoint reads and tensor diffs dominate: plain is one checkpoint comparison,"
            f" the floor {comparisons['floor']} (K(K-1)/2), judging {comparisons['judge']} (the"
            f" plain one plus the candidate's K={k} weight distances to the replicas, worked"
            " out only when the pair is beyond the tolerance and the rule must judge it: a"
            " replay within the tolerance pays nothing for the floor); reading the floor back"
            " and the rule itself take"
            " milliseconds (times.floor_read, times.rule; with the replicas' manifests read"
            " back they make judge_beyond_checkpoint_compares_min_s, which does not grow with the"
            " checkpoint). explained_by_checkpoint_compares: comparisons x"
            " one bare compare_checkpoints, over the operation (minimum times: the host is"
            " shared, and medians carry its load)"
        ),
        "build_s": built["build_s"],
        "warmup_s": round(warm_s, 2),
        "machine": {
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "compare_threads": 1,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    if errors:
        out["error"] = "; ".join(errors)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size-mb", type=int, default=1024, help="MiB of one checkpoint")
    ap.add_argument("--k", type=int, default=3, help="replicas in the floor (>= 2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tensors", type=int, default=8, help="tensors per checkpoint")
    ap.add_argument("--steps", type=int, default=300, help="metric history points")
    ap.add_argument("--noise", type=float, default=1e-3, help="relative weight noise")
    ap.add_argument("--metric-noise", type=float, default=5e-4, help="relative metric noise")
    args = ap.parse_args(argv)
    if args.k < 2:
        ap.error("--k must be at least 2 (a floor needs two replicas)")
    if args.size_mb < 1 or args.rounds < 1 or args.tensors < 1 or args.steps < 2:
        ap.error("--size-mb, --rounds and --tensors must be >= 1, --steps >= 2")
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    folder = Path(tempfile.mkdtemp(prefix="bench-noise-", dir="/tmp"))
    try:
        out = run_bench(folder, args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out["machine"]["load_avg_at_start"] = load_at_start
    print(json.dumps(out, indent=2))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    raise SystemExit(main())
