"""A tiny but real training run that uses the replay-tui SDK.

An MLP with dropout on synthetic (or given) data, a DataLoader with 2 workers and
shuffling, a loss line per step on stdout, and the final checkpoint saved as both
.safetensors and .pt.  A few seconds on a CPU.

    python examples/train_mlp.py --seed 7 --out out/
    python examples/train_mlp.py --data data/train.npz --epochs 3

Switches for experiments the tests run: ``--unseeded-noise`` adds noise drawn from an
unseeded generator (a classic reproducibility bug), ``--no-seed`` skips seeding,
``--dtype float64`` trains in double precision, ``--fail-at STEP`` crashes on purpose,
``--nondeterministic-op`` runs an op with no deterministic implementation.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import replay_tui


def load_data(path: str | None, n: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    if path:
        with np.load(path) as z:
            return torch.from_numpy(z["x"]).float(), torch.from_numpy(z["y"]).long()
    g = np.random.default_rng(1234)  # the dataset itself is fixed, whatever the seed
    x = g.standard_normal((n, dim)).astype(np.float32)
    w = g.standard_normal((dim, 4)).astype(np.float32)
    y = (x @ w).argmax(axis=1)
    return torch.from_numpy(x), torch.from_numpy(y).long()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--data", default=None, help="npz file with arrays x (float) and y (int)")
    p.add_argument("--out", default="out")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--no-deterministic", action="store_true")
    p.add_argument("--unseeded-noise", action="store_true")
    p.add_argument("--no-seed", action="store_true", help="skip seed_everything (a gap)")
    p.add_argument("--fail-at", type=int, default=-1)
    p.add_argument(
        "--nondeterministic-op",
        action="store_true",
        help="call Tensor.put_, which has no deterministic implementation (for the tests)",
    )
    args = p.parse_args(argv)

    seed = None if args.no_seed else replay_tui.seed_everything(args.seed)
    replay_tui.deterministic(not args.no_deterministic)
    run = replay_tui.start_run("mlp-synthetic", config=vars(args) | {"seed": seed})

    x, y = load_data(args.data, args.samples, 16)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    x = x.to(dtype)
    ds = TensorDataset(x, y)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        worker_init_fn=replay_tui.worker_init_fn,
        generator=None if seed is None else replay_tui.dataloader_generator(),
        persistent_workers=args.workers > 0,
    )
    model = nn.Sequential(
        nn.Linear(x.shape[1], args.hidden),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(args.hidden, 4),
    ).to(dtype=dtype, device=args.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    noise_gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))

    if args.nondeterministic_op:
        torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for xb, yb in loader:
            if args.unseeded_noise:
                xb = xb + 1e-3 * torch.randn(xb.shape, generator=noise_gen, dtype=xb.dtype)
            xb, yb = xb.to(args.device), yb.to(args.device)
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            if step == args.fail_at:
                raise RuntimeError(f"deliberate failure at step {step}")
            run.log_metric("loss", loss.item(), step)
            print(f"step {step} loss {loss.item():.8f}", flush=True)
            step += 1
        model.eval()
        with torch.no_grad():
            xd, yd = x.to(args.device), y.to(args.device)
            acc = (model(xd).argmax(1) == yd).to(dtype).mean().item()
        run.log_metric("accuracy", acc, epoch)
        print(f"epoch {epoch} accuracy {acc:.6f}", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    torch.save(state, out / "model.pt")
    run.log_artifact(out / "model.safetensors")
    run.log_artifact(out / "model.pt")
    run.finish("succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
