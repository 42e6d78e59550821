"""Benchmark: file and tree hashing, and re-verification through the stat cache.

(a) ``sha256_file`` on one big file against ``openssl dgst -sha256`` (and coreutils
``sha256sum``, for information), warm page cache, best of N, runs interleaved so load
from elsewhere hits every tool alike. (b) A dataset of many small files (1-64 KiB)
hashed by ``hash_path`` in parallel (forked workers, ``capture/hash_pool.py``) against
serial (``workers=1``: ``speedup``, and ``speedup_paired``, the median over rounds of
serial's time over parallel's in the same round); batched threads are timed too, for
information, and so is the floor: SHA-256 of the same bytes from memory plus the five
calls per file, on each of two cores, with what ``_digest_file`` costs per file and how
the parallel hash's CPU splits between this process and its workers. (c) Re-verifying
the unchanged dataset through a ``StatCache`` against a full parallel hash. Prints one JSON
object on stdout.

    python bench/bench_hashing.py [--dir DIR] [--size-mib 1024] [--files 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_tui.capture import hash_pool, hashing
from replay_tui.capture.hashing import StatCache, TreeDigest, hash_path, sha256_file

MiB = 1 << 20
TARGET_CACHED_VS_WALK = 1.3  # re-verify an unchanged tree: within this of a bare walk
TARGET_TREE_GB_PER_S = 1.5


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


CPU_SECONDS: dict[str, float] = {}
"""Least CPU time (this process and its finished children) each timed run took, by name."""
ROUND_SECONDS: dict[str, list[float]] = {}
"""Wall time of each timed run in every round, by name: runs of one round saw alike load."""


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # pool workers, once joined
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _best_of(runs: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best wall time of each callable, the callables interleaved round by round.

    The least CPU time of each goes to ``CPU_SECONDS``: on a shared host the wall time
    says how much CPU the run was given, the CPU time what the work costs.
    """
    best = dict.fromkeys(runs, float("inf"))
    for name in runs:
        CPU_SECONDS[name] = float("inf")
        ROUND_SECONDS[name] = []
    for _ in range(repeat):
        for name, run in runs.items():
            cpu = _cpu_now()
            start = time.perf_counter()
            run()
            ROUND_SECONDS[name].append(time.perf_counter() - start)
            best[name] = min(best[name], ROUND_SECONDS[name][-1])
            CPU_SECONDS[name] = min(CPU_SECONDS[name], _cpu_now() - cpu)
    return best


def _paired_ratio(name: str, base: str) -> float:
    """Median over rounds of ``name``'s time over ``base``'s in the same round: on a shared
    host, steadier than the ratio of two bests taken in different rounds."""
    return statistics.median(
        t / b for t, b in zip(ROUND_SECONDS[name], ROUND_SECONDS[base], strict=True)
    )


def _tool_digest(argv: list[str]) -> str:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return out.split("=")[-1].strip() if "=" in out else out.split()[0]


def _runner(argv: list[str]) -> Callable[[], object]:
    return lambda: _tool_digest(argv)


def _write_big_file(path: Path, size: int) -> None:
    block = os.urandom(64 * MiB)
    with open(path, "wb") as out:
        written = 0
        while written < size:
            n = min(len(block), size - written)
            out.write(block[:n] if n < len(block) else block)
            written += n
            block = block[1:] + block[:1]  # no two blocks alike


def bench_file(workdir: Path, size_mib: int, repeat: int) -> dict[str, Any]:
    path = workdir / "big.bin"
    size = size_mib * MiB
    _log(f"(a) writing {size_mib} MiB")
    _write_big_file(path, size)
    expected = sha256_file(path)  # also warms the page cache
    tools: dict[str, list[str]] = {"openssl": ["openssl", "dgst", "-sha256", str(path)]}
    if shutil.which("sha256sum"):
        tools["sha256sum"] = ["sha256sum", str(path)]
    for name, argv in tools.items():
        if _tool_digest(argv) != expected:
            raise SystemExit(f"{name} disagrees with sha256_file")
    runs: dict[str, Callable[[], object]] = {"sha256_file": lambda: sha256_file(path)}
    runs.update({name: _runner(argv) for name, argv in tools.items()})
    _log(f"(a) timing {', '.join(runs)}, best of {repeat}")
    best = _best_of(runs, repeat)
    result: dict[str, Any] = {"size_bytes": size}
    for name, seconds in best.items():
        result[name] = {"seconds": round(seconds, 4), "gb_per_s": round(size / seconds / 1e9, 3)}
    result["ratio_vs_openssl"] = round(best["openssl"] / best["sha256_file"], 3)

    with StatCache(workdir / "file-cache.sqlite") as cache:
        time.sleep(max(0.0, path.stat().st_ctime + 2.2 - time.time()))  # past the racy window
        hash_path(path, cache=cache)
        cached = _best_of({"cached": lambda: hash_path(path, cache=cache)}, 5)["cached"]
    result["stat_cache_verify_s_info"] = round(cached, 6)
    result["stat_cache_speedup_info"] = round(best["sha256_file"] / cached)
    path.unlink()
    return result


def _write_dataset(root: Path, files: int) -> int:
    rng = random.Random(20_000)
    folders = max(1, files // 200)
    total = 0
    for i in range(files):
        folder = root / f"part-{i % folders:03d}"
        if i < folders:
            folder.mkdir(parents=True)
        size = rng.randint(1024, 64 * 1024)
        (folder / f"sample-{i:06d}.bin").write_bytes(rng.randbytes(size))
        total += size
    return total


def bench_tree(workdir: Path, files: int, repeat: int) -> tuple[dict[str, Any], Path, float]:
    root = workdir / "dataset"
    _log(f"(b) writing {files} files")
    total = _write_dataset(root, files)
    digests: dict[str, TreeDigest] = {}

    def run(name: str, **kwargs: Any) -> Callable[[], object]:
        def go() -> None:
            digests[name] = hash_path(root, **kwargs)

        return go

    def threads() -> None:
        with mock.patch.object(hash_pool, "fork_is_safe", lambda: False):
            digests["threads"] = hash_path(root)

    hash_path(root, workers=1)  # warm the page cache
    strategy = hashing._choose_strategy(files, total, hashing._worker_count(None))
    _log(f"(b) timing serial, parallel ({strategy}), batched threads, best of {repeat}")
    best = _best_of(
        {"serial": run("serial", workers=1), "parallel": run("parallel"), "threads": threads},
        repeat,
    )
    if len({d.sha256 for d in digests.values()}) != 1:
        raise SystemExit(f"parallel and serial digests differ: {digests}")
    result: dict[str, Any] = {
        "files": files,
        "total_bytes": total,
        "workers": hashing._worker_count(None),
        "parallel_strategy": strategy,
    }
    for name, seconds in best.items():
        result[f"{name}_s"] = round(seconds, 4)
        result[f"{name}_files_per_s"] = round(files / seconds)
        result[f"{name}_gb_per_s"] = round(total / seconds / 1e9, 3)
        result[f"{name}_cpu_s"] = round(CPU_SECONDS[name], 4)  # incl. pool workers
    result["parallel_gb_per_s_target"] = TARGET_TREE_GB_PER_S
    result["parallel_gb_per_cpu_s"] = round(total / CPU_SECONDS["parallel"] / 1e9, 3)
    result["parallel_cores_busy"] = round(CPU_SECONDS["parallel"] / best["parallel"], 2)
    result.update(_parent_share(root, repeat))
    result["speedup"] = round(best["serial"] / best["parallel"], 3)
    result["threads_speedup_info"] = round(best["serial"] / best["threads"], 3)
    result["speedup_paired"] = round(1 / _paired_ratio("parallel", "serial"), 3)
    result.update(_tree_floor(root, total, files, repeat))
    return result, root, best["parallel"]


def _parent_share(root: Path, repeat: int) -> dict[str, Any]:
    """The parallel hash's CPU split: this process (walk, listing, pipes) and the forked
    children (the files), least of each over ``repeat`` runs."""
    parent = children = float("inf")
    for _ in range(repeat):
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        hash_path(root)
        own2 = resource.getrusage(resource.RUSAGE_SELF)
        kids2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        parent = min(parent, own2.ru_utime + own2.ru_stime - own.ru_utime - own.ru_stime)
        children = min(children, kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime)
    return {
        "parallel_parent_cpu_s": round(parent, 4),
        "parallel_children_cpu_s": round(children, 4),
    }


def _tree_floor(root: Path, total: int, files: int, repeat: int) -> dict[str, Any]:
    """What no code path can beat: SHA-256 of the same bytes from memory on one core, and
    the calls each file needs (open, fstat, read, fstat, close) with no hashing."""
    paths = sorted(os.fsencode(p) for p in root.rglob("*.bin"))
    contents = [Path(os.fsdecode(p)).read_bytes() for p in paths]
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

    def sha_only() -> None:
        for data in contents:
            hashlib.sha256(data).digest()

    def calls_only() -> None:
        for path in paths:
            fd = os.open(path, flags)
            try:
                size = os.fstat(fd).st_size
                os.read(fd, size + 1)
                os.fstat(fd)
            finally:
                os.close(fd)

    def digest_files() -> None:  # what a child does per file, in this process
        for path in paths:
            hashing._digest_file(path)

    best = _best_of(
        {"sha_only": sha_only, "calls_only": calls_only, "digest_file": digest_files}, repeat
    )
    contents.clear()
    per_file = (CPU_SECONDS["sha_only"] + CPU_SECONDS["calls_only"]) / files
    return {
        "sha256_in_memory_gb_per_s_info": round(total / best["sha_only"] / 1e9, 3),
        "calls_per_file_us_info": round(CPU_SECONDS["calls_only"] / files * 1e6, 2),
        "digest_file_per_file_us_info": round(CPU_SECONDS["digest_file"] / files * 1e6, 2),
        "floor_2_cores_gb_per_s_info": round(2 * total / files / per_file / 1e9, 3),
    }


def bench_cache(workdir: Path, root: Path, full_s: float, repeat: int) -> dict[str, Any]:
    cache_path = workdir / "stat-cache.sqlite"
    with StatCache(cache_path) as cache:
        # Files changed within the racy window are not cached: let the newest ones settle.
        newest = max(p.stat().st_ctime for p in root.rglob("*"))
        time.sleep(max(0.0, newest + 2.2 - time.time()))
        start = time.perf_counter()
        filled = hash_path(root, cache=cache)
        fill_s = time.perf_counter() - start
        per_file_s = float("inf")

        def per_file() -> None:  # the same, without the folder record: per-file lookups
            nonlocal per_file_s
            with mock.patch.object(cache, "_lookup_tree", lambda *_: None):
                start = time.perf_counter()
                if hash_path(root, cache=cache) != filled:
                    raise SystemExit("per-file cached digest differs")
                per_file_s = min(per_file_s, time.perf_counter() - start)

        def cached() -> None:
            if hash_path(root, cache=cache) != filled:
                raise SystemExit("cached digest differs")

        def walk() -> None:  # what re-verification walks: one lstat per entry, no sorting
            hashing._walk(os.fsencode(os.path.realpath(root)), with_stat=True)

        def bare_walk() -> None:
            """The floor: every folder listed, every entry lstat-ed, nothing else."""
            stack = [os.fsencode(os.path.realpath(root))]
            while stack:
                with os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        entry.stat(follow_symlinks=False)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)

        def bare_walk_fd() -> None:
            """The same, each folder listed through its descriptor as ``_walk`` lists it
            (an ``fstatat`` of a name per entry, not an ``lstat`` of its whole path)."""
            stack = [os.fsencode(os.path.realpath(root))]
            while stack:
                folder = stack.pop()
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            entry.stat(follow_symlinks=False)
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(folder + b"/" + os.fsencode(entry.name))
                finally:
                    os.close(fd)

        _log(f"(c) timing cached re-verification, {max(repeat, 9)} rounds")
        best = _best_of(
            {
                "cached": cached,
                "per_file": per_file,
                "walk": walk,
                "bare_walk": bare_walk,
                "bare_walk_fd": bare_walk_fd,
            },
            max(repeat, 9),
        )
    return {
        "full_hash_s": round(full_s, 4),
        "first_fill_s": round(fill_s, 4),
        "cached_verify_s": round(best["cached"], 4),
        "cached_per_file_lookups_s": round(per_file_s, 4),
        "walk_and_stat_only_s": round(best["walk"], 4),
        "bare_walk_lstat_s": round(best["bare_walk"], 4),
        "bare_walk_fd_lstat_s_info": round(best["bare_walk_fd"], 4),
        "cached_vs_bare_walk": round(_paired_ratio("cached", "bare_walk"), 3),
        "cached_vs_bare_walk_of_bests_info": round(best["cached"] / best["bare_walk"], 3),
        "cached_vs_bare_walk_fd_info": round(_paired_ratio("cached", "bare_walk_fd"), 3),
        "walk_vs_bare_walk_info": round(_paired_ratio("walk", "bare_walk"), 3),
        "cached_vs_bare_walk_cpu": round(CPU_SECONDS["cached"] / CPU_SECONDS["bare_walk"], 3),
        "cached_vs_bare_walk_target": TARGET_CACHED_VS_WALK,
        "speedup": round(full_s / best["cached"], 2),
        "speedup_per_file_lookups": round(full_s / per_file_s, 2),
        "cache_file_bytes": cache_path.stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="where temp files go")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-hashing-", dir=args.dir))
    load_before = os.getloadavg()
    try:
        file_result = bench_file(workdir, args.size_mib, args.repeat)
        tree_result, root, full_s = bench_tree(workdir, args.files, args.repeat)
        cache_result = bench_cache(workdir, root, full_s, args.repeat)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    openssl = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout
    report = {
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "openssl": openssl.strip(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "file": file_result,
        "tree": tree_result,
        "stat_cache": cache_result,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
