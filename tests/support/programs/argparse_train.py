"""A tiny uninstrumented training program with the shape of the public ones.

Hyperparameters come from argparse flags (``--lr=3e-3``, ``--epochs 2``,
``--compile/--no-compile``) and an optional ``--config FILE`` (YAML or JSON) whose keys
fill the defaults; extra ``key=value`` overrides are accepted as Hydra would.  It never
imports replay_tui: the launcher has to find the configuration in argv.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--config", default=None)
    p.add_argument("--out", default="out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    cfg: dict[str, object] = {}
    if args.config:
        text = Path(args.config).read_text()
        if args.config.endswith(".json"):
            cfg = json.loads(text)
        else:
            import yaml

            cfg = yaml.safe_load(text)
    hidden = int(cfg.get("hidden", 8))  # type: ignore[call-overload]
    torch.manual_seed(args.seed)
    x = torch.randn(64, 4)
    y = (x.sum(1, keepdim=True) > 0).float()
    model = torch.nn.Sequential(
        torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    step = 0
    for _ in range(args.epochs):
        for i in range(0, 64, args.batch_size):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(x[i : i + args.batch_size]), y[i : i + args.batch_size]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step} loss {loss.item():.6f}", flush=True)
            step += 1
    os.makedirs(args.out, exist_ok=True)
    torch.save(model.state_dict(), Path(args.out) / "model.pt")


if __name__ == "__main__":
    main()
