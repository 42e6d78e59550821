"""Benchmark: what ``replay-tui record`` adds to a real training run's wall time.

A nanoGPT-like program (a small GPT in torch: token and position embeddings, attention
and MLP blocks, tied head; AdamW) reads a data folder (``train.bin``/``val.bin`` of
uint16 tokens, ``meta.json``), prints ``iter N: loss X`` lines, and saves one
checkpoint with ``torch.save`` holding the model, the optimizer state (Adam's two
moments: ~3x the weights), model_args, iter_num, best_val_loss and config: ~120 MB with
the default sizes.  It runs in a git repository made here, on CUDA where there is one.

Each round runs every variant once, in a rotated order, on the same seed (a new seed
each round, so each checkpoint is new bytes and the object store really copies it):

- ``bare``: ``python train.py ...``
- ``record``: ``replay-tui record --artifact 'out/*' --data data --metric-regex ... --``
  the same command, as it is now (only what the launch needs imported before it, the
  store opened after; the probes and the other imports while the command runs; the
  checkpoint read once for its sha256, its tensor digest, torch-free, and its copy into
  the object store, as soon as the program closes it (``capture.outputs.EarlyOutputs``)
  or else after the end; the process ended without the interpreter's teardown);
- ``record_sequential``: the same with ``REPLAY_TUI_RECORD_SEQUENTIAL=1``, everything in
  turn as before the overlap (the reference measured in the same run);
- ``record_ref_<REF>`` (``--baseline-ref REF``, e.g. ``HEAD``): the launcher's code at a
  git ref, extracted with ``git archive`` and run with it first on ``PYTHONPATH``.

Prints one JSON object: each variant's wall time, the time it adds over ``bare`` in the
same round (median and spread) and the ratio.  On a shared machine the training program's
own time varies by seconds from run to run, so the program writes its own span (first
line to end, ``BENCH_CHILD_TIMES``) and ``added_outside_program_s`` is the wall time
outside the program less bare's, round by round: what the launcher adds, free of that
noise (``program_s`` says whether the program itself ran slower under it).  Where even
bare's own start and exit swing (a loaded machine), ``launcher_outside_command_s`` is
the steadier figure: a recording's wall time less the command's own, from its start to
its exit as the launcher timed it.  And, from the launcher's own timing marks
(``REPLAY_TUI_RECORD_TIMINGS``), where the added time goes: process start-up and
imports before ``record`` begins, the work before the command starts, what still
happens after the command ends (phase by phase), what was read early, and the exit;
beside it the reference for that end: the run's new outputs read once from the page
cache right after each recording (``outputs_read_once_from_page_cache_s``,
``after_end_over_read_once``).  No thresholds: the
issue's target (median added time <= 0.5 s, or <= 1.05x bare on a 30 s run) is printed
beside.

Every process runs with a bytecode cache (``PYTHONPYCACHEPREFIX`` in the temporary
folder, filled by the warm-up round), as an installed program has its ``.pyc`` files;
``--no-bytecode-cache`` compiles every module at every start instead, as under
``PYTHONDONTWRITEBYTECODE=1`` (which the development machine's shells set: the first
measurements in DEVELOPERS.md were taken so).

    python bench/bench_record.py                       # 5 rounds, ~10 s runs on a CPU
    python bench/bench_record.py --steps 60 --rounds 3 # ~30 s runs
    python bench/bench_record.py --baseline-ref HEAD   # also the code at HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

TARGET_ADDED_S = 0.5
TARGET_RATIO_30S = 1.05
METRIC_REGEX = r"iter (?P<step>\d+): loss (?P<value>[0-9.]+)"

TRAIN_PY = '''\
"""A small nanoGPT-like training run (written by bench/bench_record.py)."""

import time

T_START = time.time()  # before the imports: BENCH_CHILD_TIMES gets the program's own span

import argparse
import json
import os
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, d, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as nanoGPT
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data")
    p.add_argument("--out", default="out")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    with open(os.path.join(args.data, "meta.json")) as f:
        vocab = int(json.load(f)["vocab_size"])
    train = np.memmap(os.path.join(args.data, "train.bin"), dtype=np.uint16, mode="r")
    val = np.memmap(os.path.join(args.data, "val.bin"), dtype=np.uint16, mode="r")
    g = np.random.default_rng(args.seed)

    def batch(split):
        ix = g.integers(0, len(split) - args.block - 1, args.batch)
        x = np.stack([split[i : i + args.block] for i in ix]).astype(np.int64)
        y = np.stack([split[i + 1 : i + 1 + args.block] for i in ix]).astype(np.int64)
        return torch.from_numpy(x).to(args.device), torch.from_numpy(y).to(args.device)

    model = GPT(vocab, args.block, args.layers, args.d, args.heads).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for it in range(args.steps):
        t0 = time.time()
        x, y = batch(train)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        ms = (time.time() - t0) * 1000
        print(f"iter {it}: loss {loss.item():.4f}, time {ms:.2f}ms", flush=True)
    with torch.no_grad():
        val_loss = model(*batch(val))
    os.makedirs(args.out, exist_ok=True)
    ckpt = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "model_args": {
            "n_layer": args.layers,
            "n_head": args.heads,
            "n_embd": args.d,
            "block_size": args.block,
            "bias": True,
            "vocab_size": vocab,
            "dropout": 0.0,
        },
        "iter_num": args.steps,
        "best_val_loss": val_loss.detach().cpu(),
        "config": vars(args),
    }
    torch.save(ckpt, os.path.join(args.out, "ckpt.pt"))
    print(f"val loss {val_loss.item():.4f}", flush=True)
    if os.environ.get("BENCH_CHILD_TIMES"):
        with open(os.environ["BENCH_CHILD_TIMES"], "w") as f:
            json.dump({"start": T_START, "end": time.time()}, f)


if __name__ == "__main__":
    main()
'''


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def make_workspace(root: Path, vocab: int, tokens: int) -> Path:
    """A git repository with train.py and its data folder (ignored, as nanoGPT's)."""
    import numpy as np

    repo = root / "gpt"
    (repo / "data").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text(TRAIN_PY)
    (repo / ".gitignore").write_text("out/\ndata/\n")
    g = np.random.default_rng(0)
    g.integers(0, vocab, tokens, dtype=np.uint16).tofile(repo / "data" / "train.bin")
    g.integers(0, vocab, tokens // 10, dtype=np.uint16).tofile(repo / "data" / "val.bin")
    (repo / "data" / "meta.json").write_text(json.dumps({"vocab_size": vocab}))
    git(repo, "add", "train.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "train")
    return repo


def extract_ref(ref: str, dest: Path) -> Path:
    """The launcher's packages at ``ref``, from ``git archive`` (the working tree and
    the index are not touched)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", ref, "replay_tui", "storage"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    q = (
        statistics.quantiles(ordered, n=4, method="inclusive")
        if len(ordered) > 1
        else [ordered[0]] * 3
    )
    return {
        "median": round(statistics.median(ordered), 3),
        "min": round(ordered[0], 3),
        "p25": round(q[0], 3),
        "p75": round(q[2], 3),
        "max": round(ordered[-1], 3),
    }


def median_of(dicts: list[dict[str, Any]], key: str) -> float | None:
    values = [d[key] for d in dicts if isinstance(d.get(key), int | float)]
    return round(statistics.median(values), 4) if values else None


Run = tuple[float, float, float, float, dict[str, Any] | None]
"""(start, end, wall) of one run as this process saw it, the training program's own span
(from its first line to its end, as it wrote them), and the launcher's marks."""


def run_once(argv: list[str], env: dict[str, str], repo: Path, timings: Path | None) -> Run:
    shutil.rmtree(repo / "out", ignore_errors=True)
    child = repo.parent / "child-times.json"
    child.unlink(missing_ok=True)
    if timings is not None:
        timings.unlink(missing_ok=True)
    t0 = time.time()
    proc = subprocess.run(
        argv,
        cwd=repo,
        env={**env, "BENCH_CHILD_TIMES": str(child)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    t1 = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]}... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    span = json.loads(child.read_text())
    marks = json.loads(timings.read_text()) if timings is not None and timings.exists() else None
    return t0, t1, t1 - t0, span["end"] - span["start"], marks


def summarise_marks(runs: list[Run]) -> Any:
    """Where a recorded run's time goes, median over the rounds."""
    rows: list[dict[str, Any]] = []
    early: set[str] = set()  # modules the launch need not wait for, imported before it
    for t0, t1, _, _, m in runs:
        if m is None:
            continue
        st = m["stamps"]
        row: dict[str, Any] = {
            "startup_s": st["entry"] - t0,  # interpreter, CLI and launcher imports
            "before_launch_s": m["before_launch_s"],
            "command_s": m["command_s"],
            "after_end_s": m["after_end_s"],
            "exit_s": t1 - st["done"],  # printing, interpreter teardown
        }
        for k, v in m["phase_s"].items():
            if k not in ("launch", "ran"):
                row[f"after:{k}"] = v
        for k, v in m["side_s"].items():
            row[f"side:{k}"] = v
        for k, v in m["side_after_end_s"].items():
            row[f"side_left_after_end:{k}"] = v
        for k, v in (m.get("early") or {}).items():
            row[f"early:{k}"] = float(v)
        row["torch_imported"] = 1.0 if m.get("torch_imported") else 0.0
        rows.append(row)
        early.update(m.get("imported_before_launch") or [])
    if not rows:
        return None
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out: dict[str, Any] = {k: median_of(rows, k) for k in keys}
    out["after_end_parts"] = {
        k.removeprefix("after:"): out.pop(k) for k in list(out) if k.startswith("after:")
    }
    out["side_s"] = {k.removeprefix("side:"): out.pop(k) for k in list(out) if k[:5] == "side:"}
    out["side_left_after_end_s"] = {
        k.split(":", 1)[1]: out.pop(k) for k in list(out) if k.startswith("side_left_after_end:")
    }
    out["early_outputs"] = {
        k.removeprefix("early:"): out.pop(k) for k in list(out) if k.startswith("early:")
    }
    out["torch_imported_fraction"] = out.pop("torch_imported")
    out["imported_before_launch"] = sorted(early)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12, help="training steps (about the run time)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=384, help="width (384 and 4 layers: ~120 MB)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--tokens", type=int, default=4_000_000, help="tokens in train.bin")
    ap.add_argument(
        "--baseline-ref", default=None, help="also record with the launcher at this git ref"
    )
    ap.add_argument("--no-sequential", action="store_true", help="leave record_sequential out")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="every process compiles the modules it imports from source (as under"
        " PYTHONDONTWRITEBYTECODE=1, which some shells set); by default all variants share"
        " a bytecode cache in the temporary folder (PYTHONPYCACHEPREFIX) that the warm-up"
        " round fills, as an installed program has its .pyc files",
    )
    args = ap.parse_args()

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp_name:
        tmp = Path(tmp_name)
        repo = make_workspace(tmp, args.vocab, args.tokens)
        py = sys.executable
        train = [py, "train.py", "--steps", str(args.steps)]
        train += ["--layers", str(args.layers), "--d", str(args.d)]
        base_env = {
            k: v for k, v in os.environ.items() if k not in ("REPLAY_TUI_SEED", "PYTHONHASHSEED")
        }
        base_env.pop("REPLAY_TUI_RECORD_SEQUENTIAL", None)
        if args.no_bytecode_cache:
            base_env["PYTHONDONTWRITEBYTECODE"] = "1"
            base_env.pop("PYTHONPYCACHEPREFIX", None)
        else:
            base_env.pop("PYTHONDONTWRITEBYTECODE", None)
            base_env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        base_env["PATH"] = f"{Path(py).parent}{os.pathsep}{base_env.get('PATH', '')}"
        trees = {"record": REPO_ROOT}
        if not args.no_sequential:
            trees["record_sequential"] = REPO_ROOT
        if args.baseline_ref:
            trees[f"record_ref_{args.baseline_ref}"] = extract_ref(
                args.baseline_ref, tmp / "baseline"
            )
        variants: dict[str, tuple[list[str], dict[str, str], Path | None, Path | None]] = {
            "bare": (train, base_env, None, None)
        }
        for name, tree in trees.items():
            store = tmp / f"store-{name}" / "runs.db"
            timings = tmp / f"{name}.timings.json"
            env = dict(base_env)
            env["PYTHONPATH"] = str(tree)  # python -m replay_tui: this tree's launcher
            env["REPLAY_TUI_RECORD_TIMINGS"] = str(timings)
            if name == "record_sequential":
                env["REPLAY_TUI_RECORD_SEQUENTIAL"] = "1"
            argv = [py, "-m", "replay_tui", "--store", str(store), "record", "--quiet"]
            argv += ["--artifact", "out/*", "--data", "data"]
            argv += ["--metric-regex", METRIC_REGEX, "--metric-name", "loss", "--"]
            variants[name] = (argv, env, timings, store.parent / "objects")

        read_once: list[float] = []  # the reference: the run's new outputs read once

        def run(name: str, seed: int) -> Run:
            argv, env, timings, objects = variants[name]
            if name != "bare":
                argv = argv + train
            res = run_once([*argv, "--seed", str(seed)], env, repo, timings)
            if objects is not None:  # the copies kept (one new checkpoint a run)
                shutil.rmtree(objects, ignore_errors=True)
            if name == "record":
                read_once.append(read_outputs_once(repo / "out"))
            return res

        names = list(variants)
        for name in names:  # warm-up: page cache, bytecode, the data's hash cache
            run(name, 1)
        results: dict[str, list[Run]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                results[name].append(run(name, 100 + r))
        ckpt = repo / "out" / "ckpt.pt"
        ckpt_bytes = ckpt.stat().st_size if ckpt.exists() else None
        data_bytes = sum(p.stat().st_size for p in (repo / "data").iterdir())

    bare = [w for _, _, w, _, _ in results["bare"]]
    # outside: the wall time not spent inside the training program itself; for bare, its
    # interpreter's start and exit; for a recording, those and all the launcher's work
    bare_outside = [w - c for _, _, w, c, _ in results["bare"]]
    out: dict[str, Any] = {
        "rounds": args.rounds,
        "bytecode_cache": not args.no_bytecode_cache,
        "program": {
            "steps": args.steps,
            "layers": args.layers,
            "d": args.d,
            "vocab": args.vocab,
            "checkpoint_bytes": ckpt_bytes,
            "data_bytes": data_bytes,
        },
        "bare_wall_s": stats(bare),
        "bare_program_s": stats([c for _, _, _, c, _ in results["bare"]]),
        "bare_outside_program_s": stats(bare_outside),
    }
    for name in names[1:]:
        walls = [w for _, _, w, _, _ in results[name]]
        added = [w - b for w, b in zip(walls, bare, strict=True)]
        outside = [w - c for _, _, w, c, _ in results[name]]
        out[name] = {
            "wall_s": stats(walls),
            "program_s": stats([c for _, _, _, c, _ in results[name]]),
            "added_s": stats(added),
            # what the launcher adds, free of the training program's own noise: its
            # time outside the program, less bare's, round by round
            "added_outside_program_s": stats(
                [o - b for o, b in zip(outside, bare_outside, strict=True)]
            ),
            "ratio_to_bare": round(
                statistics.median(w / b for w, b in zip(walls, bare, strict=True)), 4
            ),
            # the launcher's own time around the command: its wall time less the
            # command's (from its start to its exit, as the launcher timed it), free of
            # bare's round-to-round swings too (the child's interpreter start and exit)
            "launcher_outside_command_s": stats(
                [w - m["command_s"] for _, _, w, _, m in results[name] if m is not None]
            ),
            "where": summarise_marks(results[name]),
        }
    if read_once:
        # the second bound: what happens after the command's end takes no longer
        # than reading the run's new outputs once from the page cache
        out["outputs_read_once_from_page_cache_s"] = stats(read_once)
        where = out.get("record", {}).get("where") or {}
        if where.get("after_end_s") is not None:
            out["record"]["after_end_over_read_once"] = round(
                where["after_end_s"] / statistics.median(read_once), 2
            )
    out["walls_by_round_s"] = {n: [round(r[2], 3) for r in results[n]] for n in names}
    out["target"] = {"added_median_s": TARGET_ADDED_S, "ratio_on_a_30s_run": TARGET_RATIO_30S}
    out["machine"] = machine_info(load_at_start)
    print(json.dumps(out, indent=1))


def read_outputs_once(folder: Path) -> float:
    """Seconds to read every file in ``folder`` once, as it now is (in the page cache
    after the run that wrote it): ``readinto`` one buffer, no hashing."""
    t0 = time.perf_counter()
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    for p in sorted(folder.iterdir()):
        with p.open("rb", buffering=0) as f:
            while f.readinto(view):
                pass
    return time.perf_counter() - t0


def machine_info(load_at_start: list[float]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_at_start": load_at_start,
        "load_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except ImportError:
        info["torch"] = None
    return info


if __name__ == "__main__":
    main()
