"""TensorBoard event files, read with TensorBoard's own record reader and event protos.

The records are read by ``tensorboard``'s record reader (the one its event-file loader
uses when TensorFlow is not installed), which checks each record's length and data CRCs;
a truncated or corrupted record refuses the whole file (the loader itself would stop
there silently).  The file is opened through :mod:`replay_tui.door` (no link, a regular
file within its limit) and the reader is given that open file (``/proc/self/fd``), so it
reads the very file the door checked.  Every scalar is taken, with its step and wall
time; summaries of other kinds are not metrics."""

from __future__ import annotations

import os
from pathlib import Path

from replay_tui.capture.frameworks import SKIPPED_KEYS, FileMetrics, finite

KIND = "TensorBoard event file"


def read_event_file(cwd: Path, rel: str, limit: int) -> FileMetrics:
    """The scalars of the event file ``cwd/rel`` (raises ``door.Refused``)."""
    from replay_tui.door import Refused, open_under

    with open_under(cwd, rel, KIND, limit=limit) as opened:
        fd = os.dup(opened.fd)
        try:
            return _scalars(f"/proc/self/fd/{fd}", rel, limit, opened.size, Refused)
        finally:
            os.close(fd)


def _scalars(path: str, rel: str, limit: int, size: int, refused: type[Exception]) -> FileMetrics:
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from tensorboard.backend.event_processing import event_file_loader  # type: ignore[import-untyped]
    from tensorboard.compat import tf  # type: ignore[import-untyped]
    from tensorboard.compat.proto import event_pb2  # type: ignore[import-untyped]
    from tensorboard.data_compat import migrate_event  # type: ignore[import-untyped]
    from tensorboard.util import tensor_util  # type: ignore[import-untyped]

    del event_file_loader  # imported for its side effects on the stub (as the loader does)
    reader = tf.pywrap_tensorflow.PyRecordReader_New(path)
    out = FileMetrics()
    consumed = 0
    records = 0
    try:
        while True:
            try:
                reader.GetNext()
            except tf.errors.OutOfRangeError:
                break
            except tf.errors.DataLossError as e:
                why = str(getattr(e, "message", e)).replace(path, rel)
                raise refused(
                    f"{KIND} {rel}: record {records + 1} is truncated or corrupted ({why})"
                ) from None
            record = reader.record()
            records += 1
            consumed += len(record) + 16
            if consumed > limit or consumed > size:
                raise refused(f"{KIND} {rel} grew while it was read, past {size} bytes")
            try:
                event = migrate_event(event_pb2.Event.FromString(record))
            except DecodeError as e:
                raise refused(f"{KIND} {rel}: record {records} is not an event ({e})") from None
            if not event.HasField("summary"):
                continue
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name != "scalars" or v.tag in SKIPPED_KEYS:
                    continue
                try:
                    arr = tensor_util.make_ndarray(v.tensor)
                except (TypeError, ValueError):
                    continue
                if arr.size != 1:
                    continue
                value = arr.reshape(()).item()
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                wall = finite(event.wall_time)
                out.add(v.tag, int(event.step), float(value), wall)
    finally:
        reader.file_handle.close()
    return out
