"""bisect vs exhaustive search: probes and wall time for a pair that differs in 5 factors
with one cause, both measured in the same run on the same probes.

GOOD and BAD are real tiny training runs recorded with the real launcher from a real git
repository.  BAD differs in five factors: ``code`` (a harmless commit), ``config`` (the
same output folder spelt ``out/``), ``determinism`` (``CUBLAS_WORKSPACE_CONFIG``, no
effect on CPU), ``environment`` (``NCCL_DEBUG``, no effect on CPU) and ``seed`` (the
cause).  ``bisect`` runs its search; the reference runs every one of the 2^5 = 32 subsets
through the very same probe machinery.  Both include GOOD's noise-floor replay.

    python bench/bench_bisect.py [--backend local|docker] [--image REF]

Prints one JSON object: probes and seconds of each, and their ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay_tui.bisect import factors as fx  # noqa: E402
from replay_tui.bisect.answer import BisectResult  # noqa: E402
from replay_tui.bisect.probe import Side  # noqa: E402
from replay_tui.bisect.run import BisectOptions, _Runner, run_bisect  # noqa: E402
from replay_tui.replay.plan import ReplayOptions  # noqa: E402
from storage.store import RunStore  # noqa: E402
from tests.support.training import QUICK, cli_env, git, make_repo  # noqa: E402


def record(
    store: Path, repo: Path, seed: int, env: dict[str, str], image: str | None, *extra: str
) -> str:
    cmd = [
        str(Path(sys.executable).parent / "replay-tui"),
        "--store",
        str(store),
        "record",
        "--json",
        "--seed",
        str(seed),
        "--artifact",
        "out/*",
        "--data",
        "data/train.npz",
    ]
    if image:
        cmd += ["--image", image]
    cmd += ["--", "python3" if image else "python", "train_mlp.py", "--data", "data/train.npz"]
    cmd += [*QUICK, *extra]
    proc = subprocess.run(
        cmd, cwd=repo, env={**cli_env(), **env}, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"record failed: {proc.stderr[-2000:]}")
    return str(json.loads(proc.stdout)["run_id"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="local")
    ap.add_argument("--image", default=os.environ.get("REPLAY_TUI_TRAIN_IMAGE"))
    args = ap.parse_args()
    image = args.image if args.backend == "docker" else None
    # the local backend runs the recorded `python`: this interpreter (it has torch)
    os.environ.update({k: v for k, v in cli_env().items() if k == "PATH"})
    os.environ.pop("REPLAY_TUI_SEED", None)
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        root = Path(tmp)
        store = root / "store" / "runs.db"
        repo = make_repo(root / "repo")
        good_env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_DEBUG": "WARN"}
        bad_env = {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "NCCL_DEBUG": "INFO"}
        good = record(store, repo, 1, good_env, image)
        script = repo / "train_mlp.py"
        script.write_text(script.read_text() + "\n# harmless\n")
        git(repo, "commit", "-q", "-am", "harmless")
        bad = record(store, repo, 2, bad_env, image, "--out", "out/")
        opts = BisectOptions(replay=ReplayOptions(backend=args.backend), times=1, budget=64)
        with RunStore(store) as s:
            gm, bm = s.manifest(good), s.manifest(bad)
            differing = [f.name for f in fx.diff_factors(gm, bm).differing]
            assert differing == ["code", "config", "seed", "determinism", "environment"], differing

            t0 = time.perf_counter()
            res = run_bisect(s, good, bad, opts, persist=False)
            t_bisect = time.perf_counter() - t0

            # the reference: every subset, through the same probe machinery
            t0 = time.perf_counter()
            ex = BisectResult(good, bad, args.backend)
            runner = _Runner(
                s,
                Side(gm, tuple(s.locations(good))),
                Side(bm, tuple(s.locations(bad))),
                opts,
                lambda e: None,
                lambda: False,
                None,
                ex,
            )
            runner.floor = runner.baseline(1)
            like_bad = []
            for k in range(len(differing) + 1):
                for subset in itertools.combinations(differing, k):
                    if runner.probe(frozenset(subset), "good", "exhaustive") == "BAD":
                        like_bad.append(subset)
            t_exhaustive = time.perf_counter() - t0
        minimal = min(like_bad, key=len) if like_bad else ()
        out: dict[str, Any] = {
            "bench": "bisect",
            "backend": args.backend,
            "factors": differing,
            "bisect": {
                "causes": res.causes,
                "cleared": res.cleared,
                "probes": len(res.probes),
                "replays_total": len(res.probes) + res.times,
                "wall_s": round(t_bisect, 2),
            },
            "exhaustive": {
                "smallest_set_like_bad": list(minimal),
                "probes": len(ex.probes),
                "replays_total": len(ex.probes) + 1,
                "wall_s": round(t_exhaustive, 2),
            },
            "agree": list(minimal) == res.causes,
            "probe_ratio": round(len(ex.probes) / max(1, len(res.probes)), 2),
            "wall_ratio": round(t_exhaustive / t_bisect, 2),
        }
        print(json.dumps(out, indent=2))
        return 0 if out["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
