"""A Hugging Face ``Trainer`` run as the Transformers docs show: a tiny ``GPT2Config``
model (built here, nothing downloaded) on synthetic token ids, on the CPU.

``TrainingArguments(seed=...)`` seeds the run; the Trainer writes ``trainer_state.json``
and ``training_args.bin`` into each ``checkpoint-N/``.  It never imports replay_tui."""

from __future__ import annotations

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="out")
    args = p.parse_args()
    set_seed(args.seed)  # before the model is built, so its weights are seeded too
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    training_args = TrainingArguments(
        output_dir=args.out,
        seed=args.seed,
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=2,
        save_steps=6,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=training_args, train_dataset=Tokens(32, 16, 64)).train()


if __name__ == "__main__":
    main()
