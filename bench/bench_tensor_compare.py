"""Benchmark: compare_checkpoints on a ~1 GiB checkpoint against a plain memory copy.

Builds checkpoint A (float32 tensors) and B (A with one tensor perturbed, so the
difference path runs too), saved as .safetensors (and .pt), then times
``compare_checkpoints(A, B)`` with a warm page cache, best of N, interleaved with an
``np.copyto`` of a buffer as large as one checkpoint. Prints one JSON object.

    python bench/bench_tensor_compare.py [--size-mib 1024] [--tensors 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_tui.checkpoints.digest import tensor_digest
from replay_tui.compare.tensors import compare_checkpoints

PERTURBED = 3
TARGET_RATIO = 2.0


def build(folder: Path, size_mib: int, n_tensors: int, formats: list[str]) -> dict[str, Any]:
    """Write a.* and b.*; b differs from a in one tensor by a relative 1e-6."""
    import torch
    from safetensors.torch import save_file

    numel = max(1, (size_mib << 20) // 4 // n_tensors)
    gen = torch.Generator().manual_seed(0)
    state = {f"layers.{i:02d}.weight": torch.randn(numel, generator=gen) for i in range(n_tensors)}
    perturbed = f"layers.{PERTURBED % n_tensors:02d}.weight"
    changed = dict(state)
    changed[perturbed] = state[perturbed] * (1 + 1e-6)
    for fmt in formats:
        if fmt == "safetensors":
            save_file(state, folder / "a.safetensors")
            save_file(changed, folder / "b.safetensors")
        else:
            torch.save(state, folder / "a.pt")
            torch.save(changed, folder / "b.pt")
    return {"numel_per_tensor": numel, "bytes": numel * 4 * n_tensors, "perturbed": perturbed}


def best_of(repeat: int, *funcs: Callable[[], object]) -> tuple[list[float], list[float]]:
    """Best wall and best CPU time of each function, the runs interleaved so both see the
    same load (on a shared host the wall time also says how much CPU a run was given)."""
    best = [float("inf")] * len(funcs)
    cpu = [float("inf")] * len(funcs)
    for _ in range(repeat):
        for i, fn in enumerate(funcs):
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
            cpu[i] = min(cpu[i], time.process_time() - start_cpu)
    return best, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=1024, help="size of one checkpoint")
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--formats", default="safetensors,pt", help="comma-separated")
    parser.add_argument("--digest", action="store_true", help="also time tensor_digest(a)")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]

    import torch

    folder = Path(tempfile.mkdtemp(prefix="bench-tensor-compare-", dir="/tmp"))
    try:
        info = build(folder, args.size_mib, args.tensors, formats)
        os.sync()  # fresh dirty pages being written back would slow the timed reads
        nbytes = int(info["bytes"])
        src = np.ones(nbytes, dtype=np.uint8)
        dst = np.empty(nbytes, dtype=np.uint8)
        dst.fill(0)  # touch every page: no first-touch faults in the timed copy

        def copy() -> None:
            np.copyto(dst, src)

        results: dict[str, Any] = {}
        copy_s = copy_cpu_s = float("inf")
        for fmt in formats:
            suffix = "safetensors" if fmt == "safetensors" else "pt"
            a, b = folder / f"a.{suffix}", folder / f"b.{suffix}"
            diff = compare_checkpoints(a, b)  # warms the page cache, checks the answer
            worst = diff.worst[0] if diff.worst else None
            assert diff.n_equal == args.tensors - 1 and worst is not None
            assert worst.name == info["perturbed"], worst
            (t_cmp, t_copy), (c_cmp, c_copy) = best_of(
                args.repeat, partial(compare_checkpoints, a, b), copy
            )
            copy_s, copy_cpu_s = min(copy_s, t_copy), min(copy_cpu_s, c_copy)
            results[fmt] = {
                "best_s": round(t_cmp, 4),
                "cpu_s": round(c_cmp, 4),
                "read_gbps": round(2 * nbytes / t_cmp / 1e9, 2),
                "per_checkpoint_gbps": round(nbytes / t_cmp / 1e9, 2),
                "found": {
                    "n_equal": diff.n_equal,
                    "n_close": diff.n_close,
                    "n_differ": diff.n_differ,
                    "worst": worst.name,
                    "max_abs_diff": worst.max_abs_diff,
                    "rel_l2": worst.rel_l2,
                },
            }
        main_fmt = formats[0]
        out: dict[str, Any] = {
            "bench": "tensor_compare",
            "checkpoint_bytes": nbytes,
            "n_tensors": args.tensors,
            "dtype": "float32",
            "perturbed_tensor": info["perturbed"],
            "repeat": args.repeat,
            "compare": results,
            "memcpy": {
                "what": "np.copyto of a buffer as large as one checkpoint",
                "bytes": nbytes,
                "best_s": round(copy_s, 4),
                "cpu_s": round(copy_cpu_s, 4),
                "gbps": round(nbytes / copy_s / 1e9, 2),
            },
            "ratio_vs_memcpy": round(results[main_fmt]["best_s"] / copy_s, 2),
            "ratio_vs_memcpy_cpu": round(results[main_fmt]["cpu_s"] / copy_cpu_s, 2),
            "ratio_vs_memcpy_by_format": {
                fmt: round(r["best_s"] / copy_s, 2) for fmt, r in results.items()
            },
            "ratio_format": main_fmt,
            "target_ratio": TARGET_RATIO,
            "within_target": results[main_fmt]["best_s"] / copy_s <= TARGET_RATIO,
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        }
        if args.digest:
            start = time.perf_counter()
            tensor_digest(folder / f"a.{'safetensors' if main_fmt == 'safetensors' else 'pt'}")
            seconds = time.perf_counter() - start
            out["digest"] = {"s": round(seconds, 4), "gbps": round(nbytes / seconds / 1e9, 2)}
        print(json.dumps(out))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
