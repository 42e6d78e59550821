"""Reading a 10 MB TensorBoard event file (scalars and histograms, as a run writes):
record's reader against the record reader's own bare loop over the same file
(TensorBoard's, with its CRC checks in pure Python), against the framing of the same
records with the compiled CRC32C record uses (``google-crc32c``: no proto parsed), and
against the file's bare read through the door.

    .venv/bin/python bench/bench_frameworks.py [--mb 10] [--repeat 3]

Prints JSON: seconds for each (best of ``--repeat``) and the ratios to the bare loop.
No threshold: the numbers are for reading, not for failing."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _write(folder: Path, mb: int) -> Path:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    # as a training run writes one: scalars each step, and a weight histogram (the bulk)
    w = SummaryWriter(str(folder))
    weights = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    step = 0
    while True:
        for _ in range(200):
            w.add_scalar("train/loss", 1.0 / (step + 1), step)
            w.add_scalar("train/lr", 1e-3, step)
            w.add_histogram("weights", weights + step * 1e-3, step)
            step += 1
        w.flush()
        (f,) = folder.glob("events.out.tfevents.*")
        if f.stat().st_size >= mb << 20:
            break
    w.close()
    return f


def _best(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    from tensorboard.compat import tf

    from replay_tui.capture.frameworks import LIMITS
    from replay_tui.capture.frameworks.tensorboard import crc32c, read_event_file
    from replay_tui.capture.frameworks.tensorboard import records as frame_records
    from replay_tui.door import read_under

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        f = _write(root / "out", args.mb)
        rel = f.relative_to(root).as_posix()
        limit = LIMITS["TensorBoard event file"]

        def bare() -> int:
            r = tf.pywrap_tensorflow.PyRecordReader_New(str(f))
            n = 0
            while True:
                try:
                    r.GetNext()
                except tf.errors.OutOfRangeError:
                    return n
                n += 1

        def framing() -> int:
            data = read_under(root, rel, "event file", limit=limit)
            return len(frame_records(data, rel, ValueError))

        points = read_event_file(root, rel, limit).count
        records = bare()
        t_bare = _best(bare, args.repeat)
        t_ours = _best(lambda: read_event_file(root, rel, limit), args.repeat)
        t_framing = _best(framing, args.repeat)
        t_bytes = _best(lambda: read_under(root, rel, "event file", limit=limit), args.repeat)
        print(
            json.dumps(
                {
                    "bench": "framework event file",
                    "file_bytes": f.stat().st_size,
                    "records": records,
                    "scalar_points": points,
                    "crc32c": f"{crc32c().__module__}.{crc32c().__name__}",
                    "seconds": {
                        "record_reader_bare_loop": round(t_bare, 4),
                        "read_event_file": round(t_ours, 4),
                        "framing_compiled_crc": round(t_framing, 4),
                        "door_read_bytes": round(t_bytes, 4),
                    },
                    "ratios": {
                        "read_event_file_vs_bare_loop": round(t_ours / t_bare, 3),
                        "framing_compiled_crc_vs_bare_loop": round(t_framing / t_bare, 4),
                        "door_read_vs_bare_loop": round(t_bytes / t_bare, 4),
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
