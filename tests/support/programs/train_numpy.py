"""A tiny real training run in numpy alone, for tests that need a recorded run but not
torch: starting torch costs a few seconds a process, this program a tenth of one.

A one-hidden-layer MLP trained by minibatch SGD with momentum on the same data as
``examples/train_mlp.py`` (an npz of ``x`` float and ``y`` int, or synthetic), shuffled
each epoch by a seeded generator; a loss line per step on stdout, an accuracy line per
epoch, and the final weights and the optimizer's momentum saved as two ``.safetensors``
checkpoints (both read tensor by tensor by a comparison).  It takes the
example's switches that make sense without torch (``--unseeded-noise``, ``--no-seed``,
``--fail-at``, ``--dtype``); ``--workers`` is accepted and ignored.

It trains as a program on a machine without torch would: torch is kept from importing, so
the SDK seeds Python's and numpy's generators and records no torch switch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.modules["torch"] = None  # type: ignore[assignment]  # this program runs without torch

import numpy as np  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

import replay_tui  # noqa: E402


def load_data(path: str | None, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    if path:
        with np.load(path) as z:
            return z["x"].astype(np.float32), z["y"].astype(np.int64)
    g = np.random.default_rng(1234)  # the dataset itself is fixed, whatever the seed
    x = g.standard_normal((n, dim)).astype(np.float32)
    w = g.standard_normal((dim, 4)).astype(np.float32)
    return x, (x @ w).argmax(axis=1)


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
    p.add_argument("--workers", type=int, default=0, help="accepted, ignored")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--unseeded-noise", action="store_true")
    p.add_argument("--no-seed", action="store_true", help="skip seed_everything (a gap)")
    p.add_argument("--fail-at", type=int, default=-1)
    args = p.parse_args(argv)

    seed = None if args.no_seed else replay_tui.seed_everything(args.seed)
    run = replay_tui.start_run("mlp-numpy", config=vars(args) | {"seed": seed})
    dtype = np.float64 if args.dtype == "float64" else np.float32
    x, y = load_data(args.data, args.samples, 16)
    x = x.astype(dtype)
    # np.random's global generator is what seed_everything seeds; unseeded, it is random.
    g = np.random.default_rng(np.random.randint(0, 2**31))
    noise = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    w1 = (g.standard_normal((x.shape[1], args.hidden)) / np.sqrt(x.shape[1])).astype(dtype)
    b1 = np.zeros(args.hidden, dtype)
    w2 = (g.standard_normal((args.hidden, 4)) / np.sqrt(args.hidden)).astype(dtype)
    b2 = np.zeros(4, dtype)
    params = [w1, b1, w2, b2]
    velocity = [np.zeros_like(q) for q in params]

    step = 0
    for epoch in range(args.epochs):
        order = g.permutation(len(x))
        for start in range(0, len(x), args.batch_size):
            idx = order[start : start + args.batch_size]
            xb, yb = x[idx], y[idx]
            if args.unseeded_noise:
                xb = xb + (1e-3 * noise.standard_normal(xb.shape)).astype(dtype)
            h = np.maximum(xb @ w1 + b1, 0)
            logits = h @ w2 + b2
            logits = logits - logits.max(axis=1, keepdims=True)
            prob = np.exp(logits)
            prob /= prob.sum(axis=1, keepdims=True)
            loss = float(-np.log(prob[np.arange(len(yb)), yb] + 1e-12).mean())
            grad = prob
            grad[np.arange(len(yb)), yb] -= 1
            grad /= len(yb)
            dh = (grad @ w2.T) * (h > 0)
            grads = [xb.T @ dh, dh.sum(0), h.T @ grad, grad.sum(0)]
            for q, v, dq in zip(params, velocity, grads, strict=True):
                v *= 0.9
                v += dq.astype(dtype)
                q -= (args.lr * v).astype(dtype)
            if step == args.fail_at:
                raise RuntimeError(f"deliberate failure at step {step}")
            run.log_metric("loss", loss, step)
            print(f"step {step} loss {loss:.8f}", flush=True)
            step += 1
        pred = (np.maximum(x @ w1 + b1, 0) @ w2 + b2).argmax(1)
        acc = float((pred == y).mean())
        run.log_metric("accuracy", acc, epoch)
        print(f"epoch {epoch} accuracy {acc:.6f}", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = {"0.weight": w1.T.copy(), "0.bias": b1, "3.weight": w2.T.copy(), "3.bias": b2}
    momentum = {f"{k}.momentum": v for k, v in zip(state, velocity, strict=True)}
    save_file(state, str(out / "model.safetensors"))
    save_file(momentum, str(out / "optimizer.safetensors"))
    run.log_artifact(out / "model.safetensors")
    run.log_artifact(out / "optimizer.safetensors")
    run.finish("succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
