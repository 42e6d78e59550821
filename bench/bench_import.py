"""Benchmark: an import's refusal of an oversized MLflow metric file, in time and memory.

An ``mlruns/`` folder is written by the real MLflow client (one finished run), then its
``metrics/loss`` is replaced by a file of five million points (129 MB, under the metric
file's 256 MiB limit).  ``replay-tui import mlflow`` must refuse it (exit 2) as a stream
that stops at the history limit: its peak RSS (the child's own ``ru_maxrss``, from
``wait4``) and its wall time to the refusal are measured, best of N, against references
from the same run on the same file:

- ``bare_loop``: a fresh Python reading the same file line by line, counting (what any
  reader of the whole file costs at least);
- ``client_import``: a fresh Python importing the MLflow client and nothing else (what
  the importer pays before reading a byte).

For information, the import of the same run at exactly the limit (200 000 points, taken)
is timed too.  Targets (issue 36): peak RSS of the refusal below 256 MB, time to the
refusal under 5 s.  Prints one JSON object on stdout.

    python bench/bench_import.py [--points 5000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage.manifest import MAX_HISTORY_POINTS

EXE = Path(sys.executable).parent / "replay-tui"
TARGET_RSS_MB = 256
TARGET_REFUSAL_S = 5.0


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("REPLAY_TUI_STORE", "REPLAY_TUI_IMPORT_MAX_BYTES", "REPLAY_TUI_IMPORT_MAX_POINTS"):
        env.pop(name, None)
    env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return env


WRAPPER = """
import json, os, subprocess, sys, time
with open(sys.argv[1], "wb") as so, open(sys.argv[2], "wb") as se:
    start = time.perf_counter()
    proc = subprocess.Popen(sys.argv[3:], stdout=so, stderr=se)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
print(json.dumps([os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss]))
"""
"""Runs the measured command from a small process of its own: a child's ``ru_maxrss``
counts the pages of the process it was forked from (until its exec), so the command is
started by this wrapper (a bare Python, a few MB), not by the benchmark itself."""


def _measured(cmd: list[str], out: Path) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak RSS in MB, stderr's tail) of ``cmd`` in a fresh
    process: its own rusage, from ``wait4`` in :data:`WRAPPER`."""
    wrapped = [sys.executable, "-I", "-S", "-c", WRAPPER, str(out / "stdout"), str(out / "stderr")]
    done = subprocess.run([*wrapped, *cmd], env=_env(), capture_output=True, text=True, check=True)
    code, wall, maxrss_kib = json.loads(done.stdout)
    err = (out / "stderr").read_text(errors="replace")[-400:]
    return int(code), float(wall), maxrss_kib / 1024.0, err


def _best(cmd: list[str], out: Path, repeat: int) -> dict[str, Any]:
    runs = [_measured(cmd, out) for _ in range(repeat)]
    codes = {r[0] for r in runs}
    return {
        "exit_codes": sorted(codes),
        "wall_s": round(min(r[1] for r in runs), 3),
        "peak_rss_mb": round(min(r[2] for r in runs), 1),
        "stderr_tail": runs[-1][3].strip().splitlines()[-1:] if runs[-1][3].strip() else [],
    }


def _mlruns(root: Path) -> Path:
    """An mlruns/ folder with one finished run (one point of ``loss``), by the client;
    the path of its ``metrics/loss`` file."""
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(root / "mlruns").as_uri())
    exp = client.create_experiment("bench")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "loss", 0.5, step=0)
    client.set_terminated(run.info.run_id)
    (loss,) = (root / "mlruns").glob(f"*/{run.info.run_id}/metrics/loss")
    return loss


def _metric_file(path: Path, points: int) -> None:
    with path.open("wb") as f:
        for start in range(0, points, 100_000):
            f.write(
                b"".join(
                    b"1795848115%03d 0.%06d %d\n" % (i % 1000, i % 999_983, i)
                    for i in range(start, min(points, start + 100_000))
                )
            )


BARE_LOOP = """
import sys
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        n += 1
print(n)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        root = Path(tmp)
        loss = _mlruns(root)
        mlruns = root / "mlruns"
        _log(f"writing {args.points} points to {loss}")
        _metric_file(loss, args.points)
        size = loss.stat().st_size
        store = root / "store" / "runs.db"
        _log("refusal: replay-tui import mlflow")
        refusal = _best(
            [str(EXE), "--store", str(store), "import", "mlflow", str(mlruns)], root, args.repeat
        )
        _log("reference: a bare loop over the same file")
        bare = _best([sys.executable, "-c", BARE_LOOP, str(loss)], root, args.repeat)
        _log("reference: importing the MLflow client")
        client = _best([sys.executable, "-c", "import mlflow.tracking"], root, args.repeat)
        wrapper = _best([sys.executable, "-I", "-S", "-c", "pass"], root, args.repeat)
        _log(f"at the limit: {MAX_HISTORY_POINTS} points, imported")
        _metric_file(loss, MAX_HISTORY_POINTS)
        at_limit = _best(
            [str(EXE), "--store", str(root / "s2" / "runs.db"), "import", "mlflow", str(mlruns)],
            root,
            1,
        )
    result = {
        "bench": "import",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "points": args.points,
        "file_bytes": size,
        "refusal": refusal,
        "bare_loop": bare,
        "client_import": client,
        "wrapper_alone": wrapper,
        "at_limit_import": at_limit,
        "ratios": {
            "refusal_wall_vs_bare_loop": round(refusal["wall_s"] / bare["wall_s"], 3),
            "refusal_rss_vs_bare_loop": round(refusal["peak_rss_mb"] / bare["peak_rss_mb"], 3),
            "refusal_wall_vs_client_import": round(refusal["wall_s"] / client["wall_s"], 3),
            "refusal_rss_vs_client_import": round(
                refusal["peak_rss_mb"] / client["peak_rss_mb"], 3
            ),
        },
        "targets": {
            "peak_rss_mb_below": TARGET_RSS_MB,
            "refusal_s_under": TARGET_REFUSAL_S,
            "refused_exit_2": refusal["exit_codes"] == [2],
            "rss_ok": refusal["peak_rss_mb"] < TARGET_RSS_MB,
            "time_ok": refusal["wall_s"] < TARGET_REFUSAL_S,
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
