"""A drill through Slurm vs the same drill run sequentially on the docker backend.

N example runs are recorded in the training image (one thread each: OMP_NUM_THREADS=1
is recorded with them, so a replay needs one CPU, which is what a Slurm job asks for).
Then the same N runs are drilled twice, measured in the same process: sequentially on
the docker backend, and on the slurm backend, which submits all N jobs at once.  With
S concurrent slots (the partition's CPUs, one per job) the ideal Slurm wall time is the
sequential time times ceil(N/S)/N; the ratio of the measured time to that ideal is the
figure (target: within 1.15x).  Every replay must be IDENTICAL for the numbers to count.
The time each command ran inside its container is printed too: when it grows with
concurrency, the cores (not the scheduling) are what is short.
Prints one JSON object.

    python bench/bench_slurm_drill.py [--runs 4] [--epochs 30] [--slurm-runtime docker]

Needs scripts/docker-env.sh (REPLAY_TUI_TRAIN_IMAGE in the environment) and
scripts/slurm-env.sh.  On a shared machine other work competes for the same cores:
the load average at the start is printed with the result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay_tui.capture.launcher import record  # noqa: E402
from replay_tui.capture.options import RecordOptions  # noqa: E402
from replay_tui.replay.backends.docker.engine import container_recorder  # noqa: E402
from replay_tui.replay.drill import run_drill  # noqa: E402
from replay_tui.replay.plan import ReplayOptions  # noqa: E402
from storage.store import RunStore  # noqa: E402
from tests.support.training import make_repo  # noqa: E402


def partition_cpus(partition: str | None) -> int:
    """Total CPUs of the (default) partition's usable nodes, from sinfo."""
    argv = ["sinfo", "-h", "-o", "%C %P"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        cpus, part = line.split()
        if (partition is None and part.endswith("*")) or part.rstrip("*") == partition:
            allocated, idle, _other, _total = (int(x) for x in cpus.split("/"))
            return allocated + idle
    raise SystemExit(f"no partition {partition or '(default)'} in sinfo")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--partition", default=None)
    p.add_argument(
        "--slurm-runtime",
        default="docker",
        choices=("docker", "podman", "apptainer"),
        help="what the Slurm jobs start (named, so no probe job is in the timing)",
    )
    args = p.parse_args()
    if args.runs < 4:
        sys.exit("--runs must be at least 4")
    image = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not image:
        sys.exit("REPLAY_TUI_TRAIN_IMAGE unset: run scripts/docker-env.sh first")
    slots = partition_cpus(args.partition)
    os.environ["OMP_NUM_THREADS"] = "1"  # recorded: each replay uses one CPU
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        repo = make_repo(Path(tmp) / "repo")
        store = RunStore(Path(tmp) / "store" / "runs.db")
        for seed in range(args.runs):
            script = ["python3", "train_mlp.py", "--data", "data/train.npz"]
            script += ["--epochs", str(args.epochs), "--samples", str(args.samples)]
            script += ["--workers", "0", "--seed", str(seed)]
            opts = RecordOptions(
                argv=script, cwd=repo, seed=seed, data=["data/train.npz"], artifacts=["out/*"]
            )
            ex, info = container_recorder(image, opts)
            rec = record(opts, store, executor=ex, image_info=info)
            assert rec.manifest.status == "succeeded", rec.exit.reason
        load = os.getloadavg()

        def drill(
            backend: str, extra: tuple[tuple[str, str], ...] = ()
        ) -> tuple[float, dict[str, Any]]:
            t0 = time.perf_counter()
            rep = run_drill(
                store,
                count=args.runs,
                pick="oldest",
                options=ReplayOptions(backend=backend, backend_options=extra),
            )
            return time.perf_counter() - t0, rep.to_dict()

        part = (("partition", args.partition),) if args.partition else ()
        part += (("runtime", args.slurm_runtime),)  # named: no probe job in the timing
        seq_s, seq = drill("docker")
        slurm_s, par = drill("slurm", part)

        def container_s(rep: dict[str, Any]) -> list[float]:
            """How long each replay's command ran (in its container), from its manifest."""
            return [
                round(store.manifest(r["replay_run"]).duration_s or 0.0, 3) for r in rep["runs"]
            ]

        seq_run, par_run = container_s(seq), container_s(par)
    n = args.runs
    ideal_s = seq_s * math.ceil(n / slots) / n
    ratio = slurm_s / ideal_s
    verdicts = [r["verdict"] for r in seq["runs"]] + [r["verdict"] for r in par["runs"]]
    print(
        json.dumps(
            {
                "bench": "slurm_drill",
                "image": image,
                "runs": n,
                "slurm_runtime": args.slurm_runtime,
                "concurrent_slots": slots,
                "docker_sequential_s": round(seq_s, 3),
                "slurm_drill_s": round(slurm_s, 3),
                "speedup": round(seq_s / slurm_s, 3),
                "ideal_speedup": round(n / math.ceil(n / slots), 3),
                "ideal_slurm_s": round(ideal_s, 3),
                "ratio_vs_ideal": round(ratio, 3),
                "target_ratio": 1.15,
                "within_target": ratio <= 1.15,
                "per_run_docker_s": [round(r["duration_s"], 3) for r in seq["runs"]],
                "per_run_slurm_s": [round(r["duration_s"], 3) for r in par["runs"]],
                "container_run_docker_s": seq_run,
                "container_run_slurm_s": par_run,
                "container_cpu_slowdown_when_concurrent": round(
                    statistics.median(par_run) / statistics.median(seq_run), 3
                ),
                "all_identical": all(v == "IDENTICAL" for v in verdicts),
                "verdicts": verdicts,
                "cpus": os.cpu_count(),
                "loadavg_at_start": [round(x, 2) for x in load],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
