"""Which files the common training frameworks write, by name alone: what both the
metrics reader (``--metrics-file``) and the framework readers
(:mod:`replay_tui.capture.frameworks`) ask, so neither imports the other."""

from __future__ import annotations

import re
from pathlib import PurePosixPath


def kind_of(rel: str) -> str | None:
    """The kind of framework file ``rel`` names (a key of :data:`LIMITS`), or None."""
    name = PurePosixPath(rel).name
    if name.startswith("events.out.tfevents."):
        return "TensorBoard event file"
    if name == "metrics.csv":
        return "Lightning metrics.csv"
    if name == "hparams.yaml":
        return "Lightning hparams.yaml"
    if name == "config.yaml" and re.fullmatch(r"version_\d+", PurePosixPath(rel).parent.name):
        return "LightningCLI config.yaml"  # what LightningCLI saves in the run's log folder
    if name == "trainer_state.json":
        return "Hugging Face trainer_state.json"
    if name == "training_args.bin":
        return "Hugging Face training_args.bin"
    return None
