"""Lightning's ``CSVLogger`` files (``metrics.csv``, ``hparams.yaml``) and the seed line
``seed_everything`` prints."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from replay_tui.capture.frameworks import SKIPPED_KEYS, FileMetrics, finite

_SEED_LINE = re.compile(rb"(?m)^(?:\[rank: 0\] )?Seed set to (\d{1,16})\s*$")
"""What ``lightning.seed_everything`` logs (``Seed set to 42``; ``[rank: 0]`` in DDP)."""


def seed_from_log(log: bytes) -> int | None:
    """The last seed ``seed_everything`` said it set, from the run's log."""
    found = _SEED_LINE.findall(log)
    if not found:
        return None
    seed = int(found[-1])
    return seed if seed <= 2**53 - 1 else None


def read_metrics_csv(raw: bytes, rel: str) -> FileMetrics:
    """``metrics.csv``: one row per logging step; its ``step`` column is the step, each
    other numeric cell a point (``epoch`` indexes, it is no metric)."""
    from replay_tui.door import Refused

    out = FileMetrics()
    text = raw.decode("utf-8", "replace")
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise Refused(f"Lightning metrics.csv {rel}: not CSV ({e})") from None
    if not header or "step" not in header:
        raise Refused(f"Lightning metrics.csv {rel}: no 'step' column in its header")
    at = header.index("step")
    try:
        for line, row in enumerate(reader, 2):
            if len(row) != len(header):
                raise Refused(
                    f"Lightning metrics.csv {rel}: line {line} has {len(row)} cells,"
                    f" the header {len(header)}"
                )
            try:
                step = int(row[at])
            except ValueError:
                continue
            for name, cell in zip(header, row, strict=True):
                if not cell or name in SKIPPED_KEYS:
                    continue
                try:
                    value = float(cell)
                except ValueError:
                    continue
                out.add(name, step, value)
    except csv.Error as e:
        raise Refused(f"Lightning metrics.csv {rel}: not CSV ({e})") from None
    return out


def read_hparams(raw: bytes, rel: str) -> dict[str, Any]:
    """``hparams.yaml``: the module's saved hyperparameters, plain YAML values only
    (``yaml.safe_load``: no tag builds an object)."""
    import yaml  # type: ignore[import-untyped]

    from replay_tui.door import Refused

    try:
        data = yaml.safe_load(raw.decode("utf-8", "replace"))
    except yaml.YAMLError as e:
        raise Refused(
            f"Lightning hparams.yaml {rel}: not YAML ({str(e).splitlines()[0]})"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Refused(f"Lightning hparams.yaml {rel}: not a mapping")
    return {str(k): v for k, v in data.items() if _plain(v)}


def _plain(v: Any, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if v is None or isinstance(v, bool | int | str):
        return True
    if isinstance(v, float):
        return finite(v) is not None
    if isinstance(v, list):
        return len(v) <= 1000 and all(_plain(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return len(v) <= 1000 and all(
            isinstance(k, str) and _plain(x, depth + 1) for k, x in v.items()
        )
    return False


def read_cli_config(raw: bytes, rel: str) -> dict[str, Any]:
    """The ``config.yaml`` LightningCLI saves in the run's log folder: its sections
    (``seed_everything``, ``trainer``, ``model``, ``data``...) as plain values."""
    import yaml

    from replay_tui.door import Refused

    try:
        data = yaml.safe_load(raw.decode("utf-8", "replace"))
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0]
        raise Refused(f"LightningCLI config.yaml {rel}: not YAML ({first})") from None
    if not isinstance(data, dict):
        raise Refused(f"LightningCLI config.yaml {rel}: not a mapping")
    return {str(k): v for k, v in data.items() if _plain(v)}
