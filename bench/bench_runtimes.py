"""Each container runtime's replay against a bare run of the same runtime, in one run.

One tiny training run is recorded in the registry image (``record --image``, Docker).
Then, for each runtime (docker, podman, apptainer), the same command is run bare
(``docker run`` / ``podman run`` / ``apptainer exec`` of the image, the repository bound
at /workspace, nothing else) and replayed (``replay-tui replay RUN --backend X``: the
checkout, the walls, the identity check, the hashing and the comparison), alternating,
``--repeat`` times each; the medians and their ratio (replay / bare) are printed, and
the ratio of the fastest of each (a busy shared host's load falls on single runs).  The
Apptainer image's conversion to a SIF (into a fresh cache) is timed on its own, before
any of it, and is in neither median.

    python bench/bench_runtimes.py [--repeat 3] [--runtimes docker,podman,apptainer]
                                   [--epochs 1] [--sif-cache DIR]

Needs scripts/docker-env.sh, podman-env.sh and apptainer-env.sh, and the training image's
variables (``set -a; . /var/lib/replay-tui-env/train-image.env; set +a``).  Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay_tui.replay.backends.apptainer.runtime import ApptainerRuntime  # noqa: E402
from replay_tui.replay.backends.docker.engine import SDK_DIR, SDK_MOUNT  # noqa: E402
from tests.support.training import (  # noqa: E402
    QUICK,
    cli_env,
    make_repo,
    record_in_image,
)

COMMAND = ["python3", "train_mlp.py", "--data", "data/train.npz", *QUICK]


def command(epochs: int) -> list[str]:
    """The recorded command; ``epochs`` scales its work (the replay's own work does not
    grow with it: a longer run shows the overhead's share shrink)."""
    argv = list(COMMAND)
    argv[argv.index("--epochs") + 1] = str(epochs)
    return argv


def bare_argv(runtime: str, ref: str, work: Path, sif: Path | None, cmd: list[str]) -> list[str]:
    """The same command in the same image, with nothing of replay-tui around it but the
    SDK the program imports."""
    sdk = f"{SDK_DIR}:{SDK_MOUNT}/replay_tui:ro"
    if runtime == "apptainer":
        assert sif is not None
        return [
            "apptainer", "--silent", "exec", "--containall", "--no-home", "--cleanenv",
            "--env", f"PYTHONPATH={SDK_MOUNT}", "--bind", sdk,
            "--bind", f"{work}:/workspace:rw", "--pwd", "/workspace", str(sif), *cmd,
        ]  # fmt: skip
    pull = ["--pull", "never"] if runtime == "podman" else []
    return [
        runtime, "run", "--rm", *pull, "--network", "none", "-e", f"PYTHONPATH={SDK_MOUNT}",
        "-v", sdk, "-v", f"{work}:/workspace", "-w", "/workspace", ref, *cmd,
    ]  # fmt: skip


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])}... failed: {proc.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runtimes", default="docker,podman,apptainer")
    ap.add_argument("--epochs", type=int, default=1, help="the run's training epochs")
    ap.add_argument(
        "--sif-cache", type=Path, default=None, help="reuse this SIF cache (no conversion timed)"
    )
    args = ap.parse_args()
    tag = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    ref = os.environ.get("REPLAY_TUI_TRAIN_DIGEST")
    if not tag or not ref:
        raise SystemExit("source /var/lib/replay-tui-env/train-image.env first")
    runtimes = [r for r in args.runtimes.split(",") if r]
    exe = str(Path(sys.executable).parent / "replay-tui")
    cmd = command(args.epochs)
    out: dict[str, Any] = {"repeat": args.repeat, "command": " ".join(cmd), "runtimes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as tmp:
        base = Path(tmp)
        store = base / "store" / "runs.db"
        repo = make_repo(base / "repo")
        rid = record_in_image(store, repo, tag, *cmd[1:])
        cache = args.sif_cache or base / "sif"
        sif = None
        if "apptainer" in runtimes:
            rt = ApptainerRuntime(cache)
            t0 = time.monotonic()
            sif = rt.ensure_sif(ref, lambda _n: None)
            took = round(time.monotonic() - t0, 2)
            out["sif_conversion_s"] = None if rt.conversions == [] else took
            out["sif_bytes"] = sif.stat().st_size
        for runtime in runtimes:
            bare: list[float] = []
            replay: list[float] = []
            for i in range(args.repeat):
                work = base / f"bare-{runtime}-{i}"
                shutil.copytree(repo, work, symlinks=True)
                os.chmod(work, 0o777)
                bare.append(timed(bare_argv(runtime, ref, work, sif, cmd)))
                argv = [exe, "--store", str(store), "replay", rid, "--backend", runtime, "--quiet"]
                if runtime == "apptainer":
                    argv += ["--apptainer-cache", str(cache)]
                replay.append(timed(argv, env=cli_env()))
            b, r = statistics.median(bare), statistics.median(replay)
            out["runtimes"][runtime] = {
                "bare_s": [round(x, 2) for x in bare],
                "replay_s": [round(x, 2) for x in replay],
                "bare_median_s": round(b, 2),
                "replay_median_s": round(r, 2),
                "ratio_replay_over_bare": round(r / b, 3),
                # the fastest of each: what is left when the host's other load is least
                "ratio_of_minima": round(min(replay) / min(bare), 3),
            }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
