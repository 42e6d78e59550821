"""CUDA paths of the SDK, measured on a real GPU (not part of CI: there is no GPU there).

Trains a small CNN (cuDNN convolutions, cuBLAS matmuls, an index_add_ that uses atomics
on CUDA) with the SDK's seed_everything, with deterministic mode on and off, and reports:

- whether two same-seed deterministic runs are bitwise identical (they must be);
- the noise floor with deterministic mode off: max weight difference, relative L2 and
  loss gap between two same-seed runs;
- ``determinism_cost_pct``: the time of a deterministic run against a non-deterministic
  one (median of ``--repeat`` runs each, after a warm-up);
- that nondeterministic ops are caught by name in warn-only mode, and that the CUBLAS
  warning fires when CUDA was initialised before ``deterministic()`` (in a subprocess).

Prints one JSON object.  Each configuration runs in a fresh subprocess so the global
flags of one cannot leak into another.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time, warnings
sys.path.insert(0, {root!r})
import torch
from torch import nn
import replay_tui.sdk as sdk

mode, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sdk.seed_everything(seed)
flags = sdk.deterministic(mode == "on")
if mode == "off":
    torch.backends.cudnn.benchmark = True
dev = sys.argv[5]

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 64, 3, padding=1)
        self.c2 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc = nn.Linear(128 * 8 * 8, 10)
        self.emb = nn.Parameter(torch.zeros(256, 128))
    def forward(self, x, idx):
        x = torch.relu(self.c1(x))
        x = nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        # index_add_ accumulates with atomics on CUDA: order-dependent sums
        pooled = torch.zeros(256, 128, device=x.device).index_add_(0, idx, x.mean((2, 3)))
        return self.fc(x.flatten(1)) + (pooled + self.emb).sum() * 1e-3

g = torch.Generator().manual_seed(1234)
X = torch.randn(4096, 3, 16, 16, generator=g)
Y = torch.randint(0, 10, (4096,), generator=g)
I = torch.randint(0, 256, (4096,), generator=g)
net = Net().to(dev)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
losses = []
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
sync()
t0 = time.perf_counter()
for step in range(steps):
    b = slice((step * 256) % 4096, (step * 256) % 4096 + 256)
    xb, yb, ib = X[b].to(dev), Y[b].to(dev), I[b].to(dev)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(xb, ib), yb)
    loss.backward()
    opt.step()
    losses.append(loss.item())
sync()
elapsed = time.perf_counter() - t0
state = {{k: v.detach().cpu() for k, v in net.state_dict().items()}}
torch.save(state, sys.argv[4])
view = sdk.inside_view()
print(json.dumps({{"elapsed_s": elapsed, "losses": losses, "flags": flags,
                  "nondeterministic_ops": view["nondeterministic_ops"],
                  "environment": view["environment"], "gpus": view["gpus"]}}))
"""

OPS_CHILD = r"""
import json, sys, warnings
sys.path.insert(0, {root!r})
import torch
import replay_tui.sdk as sdk
sdk.seed_everything(0)
sdk.deterministic(True)
dev = sys.argv[1]
x = torch.randn(1, 3, 8, 8, device=dev, requires_grad=True)
y = torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")
y.sum().backward()
torch.zeros(10, device=dev).put_(torch.tensor([1, 1], device=dev),
                                torch.tensor([1.0, 2.0], device=dev))
print(json.dumps({{"nondeterministic_ops": sdk.inside_view()["nondeterministic_ops"]}}))
"""

LATE_CHILD = r"""
import json, sys, warnings
sys.path.insert(0, {root!r})
import os
os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
import torch
torch.zeros(1, device="cuda")  # CUDA initialised first
import replay_tui.sdk as sdk
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    sdk.deterministic(True)
print(json.dumps({{"warnings": [str(x.message) for x in w]}}))
"""


def child(code: str, *args: str) -> dict:  # type: ignore[type-arg]
    env = dict(os.environ)
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    env["PYTHONHASHSEED"] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", code.format(root=str(ROOT)), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default="/tmp/gpu-det")
    p.add_argument("--device", default="cuda", help="cuda (the point) or cpu (a dry run)")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = a.device
    child(CHILD, "on", "0", "5", str(out / "warm.pt"), dev)  # warm-up: kernels, caches
    runs: dict[str, list[dict]] = {"on": [], "off": []}  # type: ignore[type-arg]
    for i in range(a.repeat):
        for mode in ("on", "off"):
            r = child(CHILD, mode, "7", str(a.steps), str(out / f"{mode}{i}.pt"), dev)
            r["path"] = str(out / f"{mode}{i}.pt")
            runs[mode].append(r)

    def diff(p1: str, p2: str) -> dict[str, float | bool]:
        s1, s2 = torch.load(p1), torch.load(p2)
        worst_abs, worst_rel, identical = 0.0, 0.0, True
        for k in s1:
            d = s1[k].double() - s2[k].double()
            if not torch.equal(s1[k], s2[k]):
                identical = False
            worst_abs = max(worst_abs, d.abs().max().item())
            n = s1[k].double().norm().item()
            worst_rel = max(worst_rel, d.norm().item() / n if n else 0.0)
        return {"bitwise_identical": identical, "max_abs_diff": worst_abs, "max_rel_l2": worst_rel}

    on = runs["on"]
    off = runs["off"]
    det_pairs = [diff(on[0]["path"], r["path"]) for r in on[1:]]
    nondet_pairs = [diff(off[0]["path"], r["path"]) for r in off[1:]]
    loss_gap_off = max(
        max(abs(x - y) for x, y in zip(off[0]["losses"], r["losses"], strict=True)) for r in off[1:]
    )
    loss_gap_on = max(
        max(abs(x - y) for x, y in zip(on[0]["losses"], r["losses"], strict=True)) for r in on[1:]
    )
    t_on = statistics.median(r["elapsed_s"] for r in on)
    t_off = statistics.median(r["elapsed_s"] for r in off)
    ops = child(OPS_CHILD, dev)
    late = child(LATE_CHILD) if dev == "cuda" else {"warnings": ["(cpu dry run: not checked)"]}
    print(
        json.dumps(
            {
                "bench": "gpu_determinism",
                "device": dev,
                "gpu": on[0]["gpus"],
                "environment": on[0]["environment"],
                "steps": a.steps,
                "repeat": a.repeat,
                "flags_on": on[0]["flags"],
                "flags_off": off[0]["flags"],
                "deterministic_runs": {"pairs": det_pairs, "max_loss_gap": loss_gap_on},
                "noise_floor_determinism_off": {
                    "pairs": nondet_pairs,
                    "max_loss_gap": loss_gap_off,
                },
                "deterministic_s": t_on,
                "nondeterministic_s": t_off,
                "determinism_cost_pct": (t_on - t_off) / t_off * 100,
                "nondeterministic_ops_caught": ops["nondeterministic_ops"],
                "nondeterministic_ops_in_training_on": on[0]["nondeterministic_ops"],
                "late_cuda_warning": late["warnings"],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
