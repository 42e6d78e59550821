"""Reading a checkpoint's bytes without torch: a safetensors header, or a ``torch.save``
zip's records and its pickle (through :mod:`replay_tui.checkpoints.unpickler`), to the
leaves the digest covers, each tensor a byte range of the file.

Both readers accept only what torch's own reading is known to accept and read the same
way (a subset: safetensors' header checks, and the opcodes, globals and checks of
torch's weights-only unpickler); whatever they do not know they decline
(:class:`~replay_tui.checkpoints.unpickler.Declined`), and torch decides, as before.
What they accept gets the very value the torch path gives:
tests/capture/test_record_overhead.py checks it against that path, dtype by dtype.
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.checkpoints.formats import buffer_format
from replay_tui.checkpoints.leaves import ROOT_NAME, join_name, key_name
from replay_tui.checkpoints.unpickler import (
    Declined,
    PickledStorage,
    PickledTensor,
    WeightsUnpickler,
)

if TYPE_CHECKING:
    from replay_tui.checkpoints.formats import Buffer


@dataclass(frozen=True)
class TensorSpan:
    """A tensor leaf: its dtype's name as torch gives it, shape, bytes [start, stop)."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    stop: int


# safetensors dtype -> (torch's name for it, bytes per element)
_SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
}
_SAFETENSORS_MAX_HEADER = 100_000_000  # safetensors' own limit
_U64 = 1 << 64


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise Declined("a key twice in the header")
    return out


def _safetensors_leaves(view: memoryview) -> dict[str, object]:
    """The tensors of a safetensors file, checked as ``safe_open`` checks them: the header
    (JSON, at most 100 MB), each tensor's dtype, shape and byte range, the ranges back to
    back from the start of the data, and the data ending where the file ends."""
    if len(view) < 8:
        raise Declined("no header")
    n = int.from_bytes(view[:8], "little")
    if n > _SAFETENSORS_MAX_HEADER or 8 + n > len(view):
        raise Declined("header length")
    text = bytes(view[8 : 8 + n]).decode("utf-8")
    if not text.startswith("{"):
        raise Declined("header start")
    header = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    if type(header) is not dict:
        raise Declined("header")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (
        type(meta) is dict and all(type(v) is str and v.encode("utf-8") for v in meta.values())
    ):
        raise Declined("metadata")
    spans: list[tuple[int, int, str, str, tuple[int, ...]]] = []
    for name, info in header.items():
        if type(info) is not dict or set(info) != {"dtype", "shape", "data_offsets"}:
            raise Declined("tensor info")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if type(dtype) is not str or dtype not in _SAFETENSORS_DTYPES:
            raise Declined("dtype")
        if type(shape) is not list or not all(type(d) is int and 0 <= d < _U64 for d in shape):
            raise Declined("shape")
        if (
            type(offsets) is not list
            or len(offsets) != 2
            or not all(type(o) is int and 0 <= o < _U64 for o in offsets)
        ):
            raise Declined("offsets")
        name.encode("utf-8")  # a lone surrogate: serde refuses the header
        spans.append((offsets[0], offsets[1], name, dtype, tuple(shape)))
    base = 8 + n
    leaves: dict[str, object] = {}
    end = 0
    for begin, stop, name, dtype, shape in sorted(spans):
        if begin != end or stop < begin:
            raise Declined("offsets not back to back")
        torch_name, size = _SAFETENSORS_DTYPES[dtype]
        if math.prod(shape) * size != stop - begin:
            raise Declined("size")
        leaves[name] = TensorSpan(torch_name, shape, base + begin, base + stop)
        end = stop
    if base + end != len(view):
        raise Declined("data and file length disagree")
    return leaves


_MAX_FORMAT_VERSION = 10  # caffe2/serialize: kMaxSupportedFileFormatVersion


class _BufferFile:
    """The least of a binary file over a memoryview, for ``zipfile``: reads copy."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        stop = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = bytes(self._view[self._pos : stop])
        self._pos = max(self._pos, stop)
        return out

    def seekable(self) -> bool:
        return True


def _zip_records(view: memoryview) -> tuple[str, dict[str, tuple[int, int]]]:
    """A ``torch.save`` zip's folder name and each record's byte range in ``view``
    (records stored, not compressed, as torch writes and memory-maps them)."""
    import zipfile

    if bytes(view[:4]) != b"PK\x03\x04":
        raise Declined("not a zip: a legacy torch file")
    with zipfile.ZipFile(_BufferFile(view)) as z:
        infos = z.infolist()
    if not infos or "/" not in infos[0].filename:
        raise Declined("no archive folder")
    prefix = infos[0].filename.split("/", 1)[0] + "/"  # as torch: the first record's folder
    if len({info.filename.lower() for info in infos}) != len(infos):
        raise Declined("a record twice (torch looks names up ignoring case)")
    records: dict[str, tuple[int, int]] = {}
    for info in infos:
        name = info.filename
        if info.compress_type != 0 or info.flag_bits & 1:
            raise Declined("a compressed or encrypted record")
        if info.compress_size != info.file_size:
            raise Declined("record size")
        at = info.header_offset
        local = bytes(view[at : at + 30])
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise Declined("local header")
        start = (
            at
            + 30
            + int.from_bytes(local[26:28], "little")
            + int.from_bytes(local[28:30], "little")
        )
        stop = start + info.file_size
        if stop > len(view):
            raise Declined("record past the end")
        if name.startswith(prefix):
            records[name[len(prefix) :]] = (start, stop)
    return prefix, records


def _torch_zip_leaves(view: memoryview) -> dict[str, object]:
    """The leaves of a ``torch.save`` zip, read as ``torch.load(weights_only=True,
    mmap=True)`` reads it, for tensors of the legacy storage types in dicts, OrderedDicts,
    lists and tuples with plain values: anything else is declined."""
    _, records = _zip_records(view)

    def record(name: str) -> bytes:
        start, stop = records[name]
        return bytes(view[start:stop])

    version = record(".data/version" if ".data/version" in records else "version")
    if not 1 <= int(version.decode("ascii").strip()) <= _MAX_FORMAT_VERSION:
        raise Declined("format version")
    if "constants.pkl" in records:
        raise Declined("a TorchScript archive")
    if "byteorder" in records and record("byteorder") != b"little":
        raise Declined("not little-endian")
    storages: dict[str, PickledStorage] = {}
    obj = WeightsUnpickler(record("data.pkl"), storages).load()
    leaves: dict[str, object] = {}
    _flatten_pickled(obj, "", leaves)
    out: dict[str, object] = {}
    for name, leaf in leaves.items():
        if not isinstance(leaf, PickledTensor):
            out[name] = leaf
            continue
        s = leaf.storage
        start, stop = records[f"data/{s.key}"]
        if stop - start != s.numel * s.itemsize:
            raise Declined("storage size")
        numel = math.prod(leaf.size)
        lo = start + leaf.offset * s.itemsize
        out[name] = TensorSpan(s.dtype, leaf.size, lo, lo + numel * s.itemsize)
    return out


def read_pickled_record(data: Buffer, inert: frozenset[str], record: str = "data.pkl") -> object:
    """The pickle in a ``torch.save`` zip (``training_args.bin``), read by the restricted
    unpickler of checkpoints without torch: plain values, and for a global of the modules
    (or full names) in ``inert``, an
    :class:`~replay_tui.checkpoints.unpickler.InertObject` naming it (never imported,
    never called).  Tensors and every other global are refused: raises ValueError."""
    view = memoryview(data).cast("B")
    try:
        _, records = _zip_records(view)
        if record not in records:
            raise Declined(f"no {record}")
        start, stop = records[record]
        return WeightsUnpickler(bytes(view[start:stop]), {}, inert).load()
    except Declined as e:
        raise ValueError(f"not read: {e}") from None
    except (IndexError, KeyError, ValueError, UnicodeDecodeError, OverflowError) as e:
        raise ValueError(f"not a readable pickle ({type(e).__name__})") from None
    except Exception as e:  # zipfile's own errors (BadZipFile...)
        raise ValueError(f"not a torch.save zip ({type(e).__name__}: {e})") from None


_PLAIN_KEYS = (str, int, bool, float, type(None))
_PLAIN_LEAVES = (*_PLAIN_KEYS, dict, list, tuple, collections.OrderedDict)  # empty ones


def _flatten_pickled(obj: object, prefix: str, out: dict[str, object]) -> None:
    """The flattening of ``opening`` (dotted names) over what :class:`WeightsUnpickler` built."""
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            if type(key) not in _PLAIN_KEYS:
                raise Declined("a key whose text torch would write differently")
            _flatten_pickled(value, join_name(prefix, key_name(key)), out)
    elif isinstance(obj, list | tuple) and obj:
        for index, value in enumerate(obj):
            _flatten_pickled(value, join_name(prefix, str(index)), out)
    else:
        if not isinstance(obj, PickledTensor) and type(obj) not in _PLAIN_LEAVES:
            raise Declined("a leaf of another type")
        name = prefix or ROOT_NAME
        if name in out:
            raise Declined("two leaves, one name")
        out[name] = obj


def leaves_without_torch(path: Path, view: memoryview) -> dict[str, object]:
    """The leaves of the checkpoint whose bytes are ``view`` (``path``'s suffix names the
    format): a :class:`TensorSpan` for each tensor, the value for any other leaf.
    Raises :class:`Declined`, or whatever a malformed file raises: either way torch decides."""
    if buffer_format(path, view) == "safetensors":
        return _safetensors_leaves(view)
    return _torch_zip_leaves(view)
