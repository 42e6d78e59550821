"""A tiny real training run whose float sums depend on arrival order, as GPU training does.

On a GPU, gradients reduced with atomics (or across data-parallel workers) are added in
whatever order they arrive, and under mixed precision that sum is rounded to bfloat16:
two runs of the same command differ from the first steps on, by a little.  This program
does the same on a CPU: each step's batch is split into micro-batches, their gradients
are added into a bfloat16 accumulator in an order drawn from the operating system's
entropy (never from the seed), and the optimizer steps on that sum.  Everything else is
seeded and deterministic, so what differs between two runs is exactly that noise: about
1e-3 in the weights' relative L2 after 60 steps, far beyond a bitwise or 1e-5 tolerance,
and far below what a real change (another learning rate, other data) does.

    python examples/train_noisy.py --seed 3 --lr 0.1 --out out/

Logs ``loss`` every step and ``val_loss`` on a held-out set every 10 steps and at the end;
saves ``out/model.safetensors``.  No accuracy: on 384 held-out samples it moves in steps
of 1/384, so one sample that flips between two runs is a jump the replicas' spread (often
exactly zero) cannot cover, and the tests built on this program must not turn on that
chance.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

import replay_tui


def load_data(path: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    if path:
        with np.load(path) as z:
            return torch.from_numpy(z["x"]).float(), torch.from_numpy(z["y"]).long()
    g = np.random.default_rng(4321)  # the data set is fixed, whatever the seed
    x = g.standard_normal((1536, 16)).astype(np.float32)
    w = g.standard_normal((16, 4)).astype(np.float32)
    y = (x @ w + 0.5 * g.standard_normal((1536, 4)).astype(np.float32)).argmax(axis=1)
    return torch.from_numpy(x), torch.from_numpy(y).long()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--micro", type=int, default=8, help="micro-batches summed per step")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--data", default=None, help="npz file with arrays x (float) and y (int)")
    p.add_argument("--out", default="out")
    args = p.parse_args(argv)

    seed = replay_tui.seed_everything(args.seed)
    replay_tui.deterministic(False)  # as production GPU training runs: determinism off
    run = replay_tui.start_run("noisy-sums", config=vars(args) | {"seed": seed})
    torch.set_num_threads(1)

    x, y = load_data(args.data)
    n_val = len(x) // 4
    xv, yv, xt, yt = x[:n_val], y[:n_val], x[n_val:], y[n_val:]
    model = nn.Sequential(nn.Linear(16, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 4))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    params = list(model.parameters())
    batches = torch.Generator().manual_seed(seed)
    arrival = random.Random(int.from_bytes(os.urandom(8), "little"))  # not the seed

    def evaluate(step: int) -> None:
        with torch.no_grad():
            out = model(xv)
            run.log_metric("val_loss", loss_fn(out, yv).item(), step)

    for step in range(args.steps):
        idx = torch.randperm(len(xt), generator=batches)[: args.batch_size]
        chunks = idx.chunk(args.micro)
        grads = []
        total = 0.0
        for c in chunks:
            loss = loss_fn(model(xt[c]), yt[c])
            grads.append(torch.autograd.grad(loss, params))
            total += loss.item() / len(chunks)
        order = list(range(len(grads)))
        arrival.shuffle(order)  # the order the micro-batch gradients arrive in
        for i, prm in enumerate(params):
            acc = torch.zeros_like(prm, dtype=torch.bfloat16)
            for j in order:
                acc += grads[j][i].to(torch.bfloat16)
            prm.grad = acc.float() / len(grads)
        opt.step()
        run.log_metric("loss", total, step)
        if step % 10 == 9:
            evaluate(step)
        print(f"step {step} loss {total:.8f}", flush=True)
    evaluate(args.steps)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    run.log_artifact(out / "model.safetensors")
    run.finish("succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
