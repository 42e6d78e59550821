"""Replay overhead: a full replay of a ~10 s training job vs a bare ``docker run``.

Both run the same command on the same image with the same mounts (the code, the data,
an output folder and the SDK); the replay adds planning, the git worktree, data
verification, image resolution, artifact hashing, the manifest and the comparison.
Alternating runs, median of ``--repeat``.  Prints one JSON object.

    python bench/bench_replay.py [--repeat 3] [--epochs 8]

Needs scripts/docker-env.sh (REPLAY_TUI_TRAIN_IMAGE in the environment).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay_tui.capture.launcher import record  # noqa: E402
from replay_tui.capture.options import RecordOptions  # noqa: E402
from replay_tui.replay.backends.docker.engine import container_recorder  # noqa: E402
from replay_tui.replay.plan import ReplayOptions  # noqa: E402
from replay_tui.replay.runner import replay_run  # noqa: E402
from storage.store import RunStore  # noqa: E402
from tests.support.training import make_repo  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--samples", type=int, default=2048)
    args = p.parse_args()
    image = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not image:
        sys.exit("REPLAY_TUI_TRAIN_IMAGE unset: run scripts/docker-env.sh first")
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        repo = make_repo(Path(tmp) / "repo")
        store = RunStore(Path(tmp) / "store" / "runs.db")
        script = [
            "python3",
            "train_mlp.py",
            "--data",
            "data/train.npz",
            "--epochs",
            str(args.epochs),
            "--samples",
            str(args.samples),
            "--workers",
            "2",
        ]
        opts = RecordOptions(
            argv=script, cwd=repo, seed=3, data=["data/train.npz"], artifacts=["out/*"]
        )
        ex, info = container_recorder(image, opts)
        rec = record(opts, store, executor=ex, image_info=info)
        run_id = rec.manifest.run_id
        bare_out = Path(tmp) / "bare-out"
        bare_out.mkdir()
        handoff = Path(tmp) / "bare-handoff"
        handoff.mkdir()
        sdk = ROOT / "replay_tui"
        bare_cmd = [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{repo}:/workspace:ro",
            "-v",
            f"{bare_out}:/workspace/out",
            "-v",
            f"{sdk}:/replay-tui/sdk/replay_tui:ro",
            "-e",
            "PYTHONPATH=/replay-tui/sdk",
            "-v",
            f"{handoff}:/replay-tui/handoff",
            "-e",
            "REPLAY_TUI_HANDOFF=/replay-tui/handoff",
            "-v",
            f"{repo / 'data'}:/workspace/data:ro",
            "-e",
            "REPLAY_TUI_SEED=3",
            "-e",
            "PYTHONHASHSEED=3",
            "-w",
            "/workspace",
            image,
            *script,
        ]
        bare: list[float] = []
        replays: list[float] = []
        run_only: list[float] = []
        verdicts: list[str | None] = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run(bare_cmd, check=True, capture_output=True)
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            out = replay_run(store, run_id, ReplayOptions(backend="docker"))
            replays.append(time.perf_counter() - t0)
            verdicts.append(out.verdict)
            if out.replay and out.replay.duration_s:
                run_only.append(out.replay.duration_s)
        b, r = statistics.median(bare), statistics.median(replays)
        print(
            json.dumps(
                {
                    "bench": "replay_overhead",
                    "image": image,
                    "training_job_s": round(statistics.median(run_only), 3) if run_only else None,
                    "bare_docker_run_s": round(b, 3),
                    "replay_s": round(r, 3),
                    "overhead_pct": round((r - b) / b * 100, 2),
                    "target_overhead_pct": 10.0,
                    "within_target": (r - b) / b * 100 <= 10.0,
                    "bare_runs_s": [round(x, 3) for x in bare],
                    "replay_runs_s": [round(x, 3) for x in replays],
                    "verdicts": verdicts,
                    "repeat": args.repeat,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
