"""A tiny torch training program that logs to MLflow, as teams' programs do.

``MLFLOW_TRACKING_URI`` names the store.  ``--fail`` ends the run as FAILED after the
first epoch.  Written to be imported by ``replay-tui import mlflow`` in the tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mlflow
import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--experiment", default="tiny")
    p.add_argument("--image", default=None)
    p.add_argument("--fail", action="store_true")
    args = p.parse_args()
    mlflow.set_experiment(args.experiment)
    with mlflow.start_run(run_name=f"lr-{args.lr}") as run:
        mlflow.log_params({"lr": args.lr, "steps": args.steps, "optimizer": "sgd", "note": "007"})
        mlflow.set_tag("team", "vision")
        if args.image:
            mlflow.set_tag("mlflow.docker.image.name", args.image)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        x, y = torch.randn(32, 4), torch.randn(32, 1)
        for step in range(args.steps):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mlflow.log_metric("loss", loss.item(), step=step)
            mlflow.log_metric("lr_now", args.lr, step=step)
            if args.fail and step == 1:
                mlflow.end_run(status="FAILED")
                print(run.info.run_id)
                return
        out = Path("out") / run.info.run_id
        out.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), out / "model.pt")
        (out / "notes.txt").write_text("tiny\n")
        mlflow.log_artifact(str(out / "model.pt"), artifact_path="ckpt")
        mlflow.log_artifact(str(out / "notes.txt"))
        print(run.info.run_id)


if __name__ == "__main__":
    main()
