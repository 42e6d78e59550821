"""A tiny torch training program that logs to W&B (offline), as teams' programs do.

Hyperparameters are argparse flags handed to ``wandb.init(config=...)``; the loss goes
to ``run.log`` every step, the checkpoint to ``wandb.save``.  ``--crash`` raises after
the first step, so the run ends with a non-zero exit code.
"""

from __future__ import annotations

import argparse

import torch
import wandb


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--crash", action="store_true")
    args = p.parse_args()
    run = wandb.init(
        project="tiny",
        config={"lr": args.lr, "steps": args.steps, "model": {"width": 4}},
        tags=["baseline"],
        settings=wandb.Settings(save_code=True),
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    for step in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"loss": loss.item(), "half": loss.item() / 2}, step=step)
        print(f"step {step} loss {loss.item():.6f}", flush=True)
        if args.crash:
            raise RuntimeError("crashed on purpose")
    torch.save(model.state_dict(), "model.pt")
    wandb.save("model.pt", policy="now")
    run.summary["best_loss"] = 0.125
    run.finish()


if __name__ == "__main__":
    main()
