"""TensorBoard event files: TensorBoard's own event protos over the records of a file read
through :mod:`replay_tui.door`, every record's two CRCs checked.

An event file is a sequence of records, each ``length`` (8 bytes, little-endian), the
masked CRC32C of those 8 bytes, ``length`` bytes of data (one ``Event`` proto) and the
masked CRC32C of the data: the format TensorBoard's record reader reads.  The records are
framed here and their CRCs computed by ``google-crc32c`` (a compiled CRC32C, with its own
fallback), or, where that package is missing, by the pure-Python CRC32C of TensorBoard's
record reader (what the reader itself does: 5 to 10 times slower).  A truncated or
corrupted record refuses the whole file (TensorBoard's loader would stop there silently).
The file is read once, within its limit (``door.open_under``: no link, a regular file).

Every scalar is taken with its step and wall time: a ``simple_value`` (what
``torch.utils.tensorboard`` and Lightning write) as TensorBoard's migration reads it (a
float32), a tensor of the ``scalars`` plugin through ``tensor_util``; summaries of other
kinds (histograms, images...) are not metrics and are not converted."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from replay_tui.capture.frameworks import SKIPPED_KEYS, FileMetrics, finite

KIND = "TensorBoard event file"
_HEAD = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_MASK = 0xFFFFFFFF


def read_event_file(cwd: Path, rel: str, limit: int) -> FileMetrics:
    """The scalars of the event file ``cwd/rel`` (raises ``door.Refused``)."""
    from replay_tui.door import Refused, open_under

    with open_under(cwd, rel, KIND, limit=limit) as opened:
        data = opened.read()
    return scalars(data, rel, Refused)


def crc32c() -> Callable[[bytes], int]:
    """The CRC32C function used: ``google_crc32c.value`` where it is installed, else
    TensorBoard's own (pure Python)."""
    try:
        import google_crc32c
    except ImportError:
        from tensorboard.compat.tensorflow_stub import (  # type: ignore[import-untyped]
            pywrap_tensorflow,
        )

        fn: Callable[[bytes], int] = pywrap_tensorflow.crc32c
        return fn
    value: Callable[[bytes], int] = google_crc32c.value
    return value


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & _MASK) + 0xA282EAD8) & _MASK


def records(data: bytes, rel: str, refused: type[Exception]) -> list[bytes]:
    """Each record's data, its length and both CRCs checked (``refused`` otherwise)."""
    crc = crc32c()
    out: list[bytes] = []
    pos, end = 0, len(data)
    while pos < end:
        n = len(out) + 1
        if end - pos < 12:
            raise refused(f"{KIND} {rel}: record {n} is truncated or corrupted (its header)")
        length, head_crc = _HEAD.unpack_from(data, pos)
        if _masked(crc(data[pos : pos + 8])) != head_crc:
            raise refused(f"{KIND} {rel}: record {n} is truncated or corrupted (its length's CRC)")
        start = pos + 12
        if length > end - start - 4:
            raise refused(f"{KIND} {rel}: record {n} is truncated or corrupted (its data)")
        body = data[start : start + length]
        (body_crc,) = _CRC.unpack_from(data, start + length)
        if _masked(crc(body)) != body_crc:
            raise refused(f"{KIND} {rel}: record {n} is truncated or corrupted (its data's CRC)")
        out.append(body)
        pos = start + length + 4
    return out


def scalars(data: bytes, rel: str, refused: type[Exception]) -> FileMetrics:
    """Every scalar of the event file's bytes ``data`` (``rel`` names it in messages)."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from tensorboard.compat.proto import event_pb2  # type: ignore[import-untyped]
    from tensorboard.util import tensor_util  # type: ignore[import-untyped]

    out = FileMetrics()
    for i, body in enumerate(records(data, rel, refused), 1):
        try:
            event = event_pb2.Event.FromString(body)
        except DecodeError as e:
            raise refused(f"{KIND} {rel}: record {i} is not an event ({e})") from None
        if not event.HasField("summary"):
            continue
        wall = finite(event.wall_time)
        for v in event.summary.value:
            if v.tag in SKIPPED_KEYS:
                continue
            which = v.WhichOneof("value")
            if which == "simple_value":  # migrated by TensorBoard to a float32 scalar
                value: object = v.simple_value
            elif which == "tensor" and v.metadata.plugin_data.plugin_name == "scalars":
                try:
                    arr = tensor_util.make_ndarray(v.tensor)
                except (TypeError, ValueError):
                    continue
                if arr.size != 1:
                    continue
                value = arr.reshape(()).item()
            else:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out.add(v.tag, int(event.step), float(value), wall)
    return out
