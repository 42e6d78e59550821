"""A training loop as Accelerate's docs show, started by ``accelerate launch``: an
``Accelerator`` that logs to TensorBoard, ``accelerate.utils.set_seed``, the model,
optimizer and data prepared by the accelerator, gradients accumulated with
``accelerator.accumulate`` (``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` sets how many),
the weights saved with ``accelerator.save``.  CPU, a tiny model, synthetic data; it never
imports replay_tui."""

from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--out", default="out")
    args = p.parse_args()
    accelerator = Accelerator(log_with="tensorboard", project_dir=args.out)
    accelerator.init_trackers("run")
    set_seed(args.seed)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    step = 0
    for _ in range(2):
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(xb), yb)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
            accelerator.log({"train_loss": loss.item()}, step=step)
            step += 1
    accelerator.end_training()
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), f"{args.out}/model.pt")


if __name__ == "__main__":
    main()
