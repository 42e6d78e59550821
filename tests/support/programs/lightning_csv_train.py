"""A Lightning module trained as Lightning's docs show, logged with ``CSVLogger``.

CPU, a tiny linear model on synthetic data, seeded with ``seed_everything`` and
``Trainer(deterministic=True)``; it never imports replay_tui (what record reads is what
Lightning wrote: ``metrics.csv``, ``hparams.yaml``, the ``Seed set to`` line)."""

from __future__ import annotations

import argparse

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--logger", choices=["csv", "tensorboard"], default="csv")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="out")
    args = p.parse_args()
    L.seed_everything(args.seed)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    logger = CSVLogger(args.out) if args.logger == "csv" else TensorBoardLogger(args.out)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        deterministic=True,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    trainer.fit(Regressor(), loader)


if __name__ == "__main__":
    main()
