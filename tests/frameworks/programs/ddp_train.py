"""A DistributedDataParallel program as PyTorch's DDP tutorial shows, started by
``torchrun``: the gloo backend on the CPU, a tiny model, synthetic data split by a
``DistributedSampler``.  Rank 0 logs the loss with ``torch.utils.tensorboard`` and saves
the weights.  It never imports replay_tui."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.utils.tensorboard import SummaryWriter


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default="out")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    sampler = DistributedSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    writer = SummaryWriter(f"{args.out}/tb") if rank == 0 else None
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            if writer is not None:
                writer.add_scalar("train/loss", loss.item(), step)
            step += 1
    if writer is not None:
        writer.close()
        torch.save(model.module.state_dict(), f"{args.out}/model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
