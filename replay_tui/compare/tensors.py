"""Checkpoint tensors: open safely, digest by content, compare tensor by tensor.

A checkpoint's file sha256 depends on its container (``torch.save`` names the zip folder
after the file stem), so beside it we give a tensor-content digest and a per-tensor diff
that says where two checkpoints differ and by how much.

torch is imported inside functions only: importing this module stays cheap.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import hashlib
import json
import math
import pickle
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    import mmap

    import numpy as np
    import torch

    Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

CHECKPOINT_SUFFIXES = frozenset({".safetensors", ".pt", ".pth", ".ckpt", ".bin"})
DIGEST_VERSION = "replay-tui/tensor-digest/v1"
ROOT_NAME = "(root)"
"""Name given to a checkpoint whose top level is a single tensor or value."""

Status = Literal[
    "equal", "close", "differs", "shape_mismatch", "dtype_mismatch", "only_a", "only_b"
]
Format = Literal["safetensors", "torch"]

_CHUNK = 1 << 18
"""Elements per chunk of the difference pass: its few buffers stay in the L3 cache."""
_REPR_LIMIT = 200


class CheckpointError(Exception):
    """A checkpoint could not be opened safely (missing, corrupt, or holding arbitrary objects)."""


def is_checkpoint(path: str | Path) -> bool:
    """Whether the file name says checkpoint (by suffix; the content is not read)."""
    return Path(path).suffix.lower() in CHECKPOINT_SUFFIXES


# --------------------------------------------------------------------------- opening


class Checkpoint:
    """An opened checkpoint: sorted flattened leaf names, tensors loaded lazily per name.

    Tensors are memory-mapped (safetensors ``safe_open``, ``torch.load(mmap=True)``), so a
    leaf costs nothing until its bytes are read. Non-tensor leaves (ints, floats, strings…)
    are kept as values. safetensors ``__metadata__`` is container data and is not a leaf.
    """

    def __init__(
        self,
        path: Path,
        fmt: Format,
        names: list[str],
        get: Callable[[str], object],
        close: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.format: Format = fmt
        self._names = names
        self._get = get
        self._close = close

    def names(self) -> list[str]:
        """Every leaf name, sorted (plain string order, the digest's order)."""
        return list(self._names)

    def leaf(self, name: str) -> object:
        """The tensor or plain value stored under ``name``."""
        return self._get(name)

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Tensor leaves in name order, one at a time."""
        import torch

        for name in self._names:
            value = self._get(name)
            if isinstance(value, torch.Tensor):
                yield name, value

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Open a checkpoint without ever unpickling arbitrary objects.

    ``.safetensors`` goes through ``safe_open``; torch files through
    ``torch.load(weights_only=True, mmap=True)``. Files whose suffix is ambiguous (``.bin``)
    are recognised by their first bytes. Raises ``CheckpointError`` naming the file and why.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: no such checkpoint file")
    if _detect_format(p) == "safetensors":
        return _open_safetensors(p)
    return _open_torch(p)


def _detect_format(path: Path) -> Format:
    if path.suffix.lower() == ".safetensors":
        return "safetensors"
    try:
        with path.open("rb") as f:
            head = f.read(9)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from e
    # safetensors: little-endian u64 header length, then a JSON object.
    if len(head) == 9 and head[8:9] == b"{" and not head.startswith(b"PK"):
        return "safetensors"
    return "torch"


def _open_safetensors(path: Path) -> Checkpoint:
    from safetensors import safe_open

    try:
        handle: Any = safe_open(str(path), framework="pt")
        names = sorted(handle.keys())
    except Exception as e:  # the Rust SafetensorError has no importable base class
        raise CheckpointError(f"{path}: not a readable safetensors file: {e}") from e

    def get(name: str) -> object:
        return handle.get_tensor(name)

    def close() -> None:
        handle.__exit__(None, None, None)

    return Checkpoint(path, "safetensors", names, get, close)


def _open_torch(path: Path) -> Checkpoint:
    import torch

    try:
        try:
            obj = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            # Legacy (pre-zip) files cannot be memory-mapped; weights_only still applies.
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path}: {_unpickling_reason(e)}") from e
    except Exception as e:
        raise CheckpointError(f"{path}: not a loadable torch checkpoint: {_first_line(e)}") from e
    leaves: dict[str, object] = {}
    _flatten(obj, "", leaves, path)
    names = sorted(leaves)
    return Checkpoint(path, "torch", names, leaves.__getitem__, leaves.clear)


def _unpickling_reason(e: pickle.UnpicklingError) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    if "Weights only load failed" not in text:
        return f"not a loadable torch checkpoint: {_first_line(e)}"
    match = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
    detail = match.group(1) if match else "it holds objects other than tensors and containers"
    detail = detail.split(" Please use ")[0]
    if detail.startswith("Unsupported operand"):
        detail += " (corrupt, or not a torch checkpoint)"
    return f"refused by safe loading (torch.load weights_only=True), nothing unpickled: {detail}"


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _flatten(obj: object, prefix: str, out: dict[str, object], path: Path) -> None:
    """Nested dicts/lists/tuples to dotted names; list indices become numbers."""
    import torch

    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            _flatten(value, _join(prefix, _key(key)), out, path)
    elif isinstance(obj, list | tuple) and not isinstance(obj, torch.Size) and obj:
        for index, value in enumerate(obj):
            _flatten(value, _join(prefix, str(index)), out, path)
    else:
        name = prefix or ROOT_NAME
        if name in out:
            raise CheckpointError(f"{path}: two leaves flatten to the same name {name!r}")
        out[name] = obj


def _key(key: object) -> str:
    return key if isinstance(key, str) else str(key) if isinstance(key, int) else repr(key)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


# --------------------------------------------------------------------------- digest


def tensor_digest(path: str | Path, *, data: Buffer | None = None) -> str:
    """sha256 (hex) of a checkpoint's content, independent of its container.

    Covers the sorted flattened names, each tensor's dtype, shape and raw little-endian
    bytes, and non-tensor leaves in a canonical form. The same state_dict saved as ``a.pt``,
    ``b.pt`` or ``.safetensors`` gives the same digest. Streams one tensor at a time.

    ``data``: the file's bytes (a memory map of the descriptor the caller opened and
    checked).  A safetensors file, or a ``torch.save`` zip of tensors in plain containers,
    is then digested from those bytes without torch (:func:`_digest_without_torch`: the
    same value, no ``import torch``; the pickle is read by a restricted interpreter of
    torch's weights-only opcodes that builds plain containers and placeholders only);
    anything else, and every call without ``data``, goes through torch as it always did.
    """
    if data is not None:
        fast = _digest_without_torch(Path(path), data)
        if fast is not None:
            return fast
    import torch

    h = hashlib.sha256(DIGEST_VERSION.encode() + b"\n")
    with open_checkpoint(path) as ckpt:
        for name in ckpt.names():
            leaf = ckpt.leaf(name)
            if isinstance(leaf, torch.Tensor):
                t = _dense(leaf)
                header = ["T", name, _dtype_name(t), list(t.shape), t.numel() * t.element_size()]
                h.update(json.dumps(header).encode() + b"\n")
                h.update(_le_bytes(t))
            else:
                h.update(json.dumps(["V", name, _canonical_value(leaf)]).encode() + b"\n")
    return h.hexdigest()


def tensor_digest_torch_free(path: str | Path, data: Buffer) -> str | None:
    """:func:`tensor_digest` of the checkpoint whose bytes are ``data``, where the
    torch-free readers know it (``path``'s suffix names the format); None where they
    decline it (torch would decide)."""
    return _digest_without_torch(Path(path), data)


# -- the digest without torch ---------------------------------------------------------
#
# Both readers accept only what torch's own reading is known to accept and read the same
# way (a subset: safetensors' header checks, and the opcodes, globals and checks of
# torch's weights-only unpickler); whatever they do not know they decline (None), and
# torch decides, as before.  What they accept gets the very value the torch path gives:
# tests/capture/test_record_overhead.py checks it against that path, dtype by dtype.


class _Declined(Exception):
    """Not a file the torch-free readers know: torch reads it."""


@dataclass(frozen=True)
class _Leaf:
    """A tensor leaf: its dtype's name as torch gives it, shape, bytes [start, stop)."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    stop: int


def _digest_without_torch(path: Path, data: Buffer) -> str | None:
    """The digest of the checkpoint whose bytes are ``data``, or None where declined."""
    if sys.byteorder != "little":
        return None  # the digest is of little-endian bytes: torch swaps them here
    view = memoryview(data)
    try:
        if view.ndim != 1 or view.itemsize != 1:
            return None
        try:
            if _buffer_format(path, view) == "safetensors":
                leaves = _safetensors_leaves(view)
            else:
                leaves = _torch_zip_leaves(view)
        except Exception:  # _Declined, or a malformed file: either way torch decides
            return None
        h = hashlib.sha256(DIGEST_VERSION.encode() + b"\n")
        for name in sorted(leaves):
            leaf = leaves[name]
            if isinstance(leaf, _Leaf):
                header = ["T", name, leaf.dtype, list(leaf.shape), leaf.stop - leaf.start]
                h.update(json.dumps(header).encode() + b"\n")
                h.update(view[leaf.start : leaf.stop])
            else:
                h.update(json.dumps(["V", name, _canonical_value(leaf)]).encode() + b"\n")
        return h.hexdigest()
    finally:
        view.release()


def _buffer_format(path: Path, view: memoryview) -> Format:
    """:func:`_detect_format` on bytes already read."""
    if path.suffix.lower() == ".safetensors":
        return "safetensors"
    head = bytes(view[:9])
    if len(head) == 9 and head[8:9] == b"{" and not head.startswith(b"PK"):
        return "safetensors"
    return "torch"


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
        raise _Declined("a key twice in the header")
    return out


def _safetensors_leaves(view: memoryview) -> dict[str, object]:
    """The tensors of a safetensors file, checked as ``safe_open`` checks them: the header
    (JSON, at most 100 MB), each tensor's dtype, shape and byte range, the ranges back to
    back from the start of the data, and the data ending where the file ends."""
    if len(view) < 8:
        raise _Declined("no header")
    n = int.from_bytes(view[:8], "little")
    if n > _SAFETENSORS_MAX_HEADER or 8 + n > len(view):
        raise _Declined("header length")
    text = bytes(view[8 : 8 + n]).decode("utf-8")
    if not text.startswith("{"):
        raise _Declined("header start")
    header = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    if type(header) is not dict:
        raise _Declined("header")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (
        type(meta) is dict and all(type(v) is str and v.encode("utf-8") for v in meta.values())
    ):
        raise _Declined("metadata")
    spans: list[tuple[int, int, str, str, tuple[int, ...]]] = []
    for name, info in header.items():
        if type(info) is not dict or set(info) != {"dtype", "shape", "data_offsets"}:
            raise _Declined("tensor info")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if type(dtype) is not str or dtype not in _SAFETENSORS_DTYPES:
            raise _Declined("dtype")
        if type(shape) is not list or not all(type(d) is int and 0 <= d < _U64 for d in shape):
            raise _Declined("shape")
        if (
            type(offsets) is not list
            or len(offsets) != 2
            or not all(type(o) is int and 0 <= o < _U64 for o in offsets)
        ):
            raise _Declined("offsets")
        name.encode("utf-8")  # a lone surrogate: serde refuses the header
        spans.append((offsets[0], offsets[1], name, dtype, tuple(shape)))
    base = 8 + n
    leaves: dict[str, object] = {}
    end = 0
    for begin, stop, name, dtype, shape in sorted(spans):
        if begin != end or stop < begin:
            raise _Declined("offsets not back to back")
        torch_name, size = _SAFETENSORS_DTYPES[dtype]
        if math.prod(shape) * size != stop - begin:
            raise _Declined("size")
        leaves[name] = _Leaf(torch_name, shape, base + begin, base + stop)
        end = stop
    if base + end != len(view):
        raise _Declined("data and file length disagree")
    return leaves


# torch.save's legacy storage classes -> (torch's dtype name, bytes per element)
_TORCH_STORAGES: dict[str, tuple[str, int]] = {
    "FloatStorage": ("float32", 4),
    "DoubleStorage": ("float64", 8),
    "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2),
    "LongStorage": ("int64", 8),
    "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2),
    "CharStorage": ("int8", 1),
    "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1),
    "ComplexFloatStorage": ("complex64", 8),
    "ComplexDoubleStorage": ("complex128", 16),
}
_GRAD_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "complex64", "complex128"})
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
        raise _Declined("not a zip: a legacy torch file")
    with zipfile.ZipFile(_BufferFile(view)) as z:
        infos = z.infolist()
    if not infos or "/" not in infos[0].filename:
        raise _Declined("no archive folder")
    prefix = infos[0].filename.split("/", 1)[0] + "/"  # as torch: the first record's folder
    if len({info.filename.lower() for info in infos}) != len(infos):
        raise _Declined("a record twice (torch looks names up ignoring case)")
    records: dict[str, tuple[int, int]] = {}
    for info in infos:
        name = info.filename
        if info.compress_type != 0 or info.flag_bits & 1:
            raise _Declined("a compressed or encrypted record")
        if info.compress_size != info.file_size:
            raise _Declined("record size")
        at = info.header_offset
        local = bytes(view[at : at + 30])
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise _Declined("local header")
        start = (
            at
            + 30
            + int.from_bytes(local[26:28], "little")
            + int.from_bytes(local[28:30], "little")
        )
        stop = start + info.file_size
        if stop > len(view):
            raise _Declined("record past the end")
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
        raise _Declined("format version")
    if "constants.pkl" in records:
        raise _Declined("a TorchScript archive")
    if "byteorder" in records and record("byteorder") != b"little":
        raise _Declined("not little-endian")
    storages: dict[str, _PickledStorage] = {}
    obj = _WeightsUnpickler(record("data.pkl"), storages).load()
    leaves: dict[str, object] = {}
    _flatten_pickled(obj, "", leaves)
    out: dict[str, object] = {}
    for name, leaf in leaves.items():
        if not isinstance(leaf, _PickledTensor):
            out[name] = leaf
            continue
        s = leaf.storage
        start, stop = records[f"data/{s.key}"]
        if stop - start != s.numel * s.itemsize:
            raise _Declined("storage size")
        numel = math.prod(leaf.size)
        lo = start + leaf.offset * s.itemsize
        out[name] = _Leaf(s.dtype, leaf.size, lo, lo + numel * s.itemsize)
    return out


@dataclass(frozen=True)
class _PickledStorage:
    key: str
    dtype: str
    itemsize: int
    numel: int


class _PickledTensor:
    """A tensor of a storage: contiguous (others are declined), within the storage."""

    __slots__ = ("offset", "size", "storage")

    def __init__(self, storage: _PickledStorage, offset: int, size: tuple[int, ...]) -> None:
        self.storage = storage
        self.offset = offset
        self.size = size

    def __reduce__(self) -> Any:
        raise _Declined("not picklable")


class _StorageType:
    __slots__ = ("dtype", "itemsize")

    def __init__(self, dtype: str, itemsize: int) -> None:
        self.dtype = dtype
        self.itemsize = itemsize


def _ints(v: object) -> tuple[int, ...]:
    if type(v) is not tuple or not all(type(x) is int for x in v):
        raise _Declined("not a tuple of ints")
    return v


def _rebuild_tensor_v2(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    requires_grad: object,
    backward_hooks: object,
    metadata: object = None,
) -> _PickledTensor:
    """torch._utils._rebuild_tensor_v2, for a contiguous tensor in bounds."""
    if not isinstance(storage, _PickledStorage) or type(offset) is not int or offset < 0:
        raise _Declined("storage")
    shape, strides = _ints(size), _ints(stride)
    if len(shape) != len(strides) or any(d < 0 for d in shape) or metadata:
        raise _Declined("size, stride or metadata")
    if type(requires_grad) is not bool or (requires_grad and storage.dtype not in _GRAD_DTYPES):
        raise _Declined("requires_grad")
    numel = math.prod(shape)
    expected = 1
    for d, st in zip(reversed(shape), reversed(strides), strict=True):
        if d != 1:
            if st != expected:
                raise _Declined("not contiguous: torch gathers it")
            expected *= d
    if offset + numel > storage.numel:
        raise _Declined("out of the storage")
    return _PickledTensor(storage, offset, shape)


def _rebuild_parameter(data: object, requires_grad: object, backward_hooks: object) -> object:
    if not isinstance(data, _PickledTensor) or type(requires_grad) is not bool:
        raise _Declined("parameter")
    if requires_grad and data.storage.dtype not in _GRAD_DTYPES:
        raise _Declined("requires_grad")
    return data


def _ordered_dict(*args: object) -> object:
    if args:
        raise _Declined("OrderedDict with arguments")
    return collections.OrderedDict()


class _InertClass:
    """A global of a module the caller allowed, by name only: nothing is imported."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class InertObject:
    """What calling or building an inert global gave: its name, arguments and state."""

    __slots__ = ("args", "name", "state")

    def __init__(self, name: str, args: tuple[Any, ...]) -> None:
        self.name = name
        self.args = args
        self.state: dict[Any, Any] | None = None


def read_pickled_record(data: Buffer, inert: frozenset[str], record: str = "data.pkl") -> object:
    """The pickle in a ``torch.save`` zip (``training_args.bin``), read by the restricted
    unpickler of checkpoints without torch: plain values, and for a global of the modules
    (or full names) in ``inert``, an :class:`InertObject` naming it (never imported,
    never called).  Tensors and every other global are refused: raises ValueError."""
    view = memoryview(data).cast("B")
    try:
        _, records = _zip_records(view)
        if record not in records:
            raise _Declined(f"no {record}")
        start, stop = records[record]
        return _WeightsUnpickler(bytes(view[start:stop]), {}, inert).load()
    except _Declined as e:
        raise ValueError(f"not read: {e}") from None
    except (IndexError, KeyError, ValueError, UnicodeDecodeError, OverflowError) as e:
        raise ValueError(f"not a readable pickle ({type(e).__name__})") from None
    except Exception as e:  # zipfile's own errors (BadZipFile...)
        raise ValueError(f"not a torch.save zip ({type(e).__name__}: {e})") from None


class _WeightsUnpickler:
    """The part of torch's weights-only unpickler (torch/_weights_only_unpickler.py) that
    ``torch.save`` of tensors in plain containers uses: the same opcodes with the same
    checks, and a few globals.  It builds placeholders, never a torch object."""

    def __init__(
        self,
        data: bytes,
        storages: dict[str, _PickledStorage],
        inert: frozenset[str] = frozenset(),
    ) -> None:
        self.data = data
        self.pos = 0
        self.storages = storages
        self.inert = inert  # modules whose globals become inert records (never imported)

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        if len(out) != n:
            raise _Declined("truncated pickle")
        self.pos += n
        return out

    def readline(self) -> bytes:
        end = self.data.index(b"\n", self.pos)
        out = self.data[self.pos : end]
        self.pos = end + 1
        return out

    def find_class(self) -> object:
        from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING

        module = self.readline().decode("utf-8")
        name = self.readline().decode("utf-8")
        if (module, name) in NAME_MAPPING:
            module, name = NAME_MAPPING[(module, name)]
        elif module in IMPORT_MAPPING:
            module = IMPORT_MAPPING[module]
        full = f"{module}.{name}"
        if full == "collections.OrderedDict":
            return _ordered_dict
        if full == "torch._utils._rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if full == "torch._utils._rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _TORCH_STORAGES:
            return _StorageType(*_TORCH_STORAGES[name])
        if full in self.inert or module.split(".")[0] in self.inert:
            return _InertClass(full)
        raise _Declined(f"global {full}")

    def persistent_load(self, pid: object) -> _PickledStorage:
        if type(pid) is not tuple or len(pid) != 5:
            raise _Declined("persistent id")
        typename, storage_type, key, _location, numel = pid
        if isinstance(typename, bytes):
            typename = typename.decode("ascii")
        if typename != "storage" or not isinstance(storage_type, _StorageType):
            raise _Declined("not a storage")
        if type(key) is not str or type(numel) is not int or numel < 0:
            raise _Declined("storage key")
        known = self.storages.get(key)
        if known is None:
            known = _PickledStorage(key, storage_type.dtype, storage_type.itemsize, numel)
            self.storages[key] = known
        elif (known.dtype, known.numel) != (storage_type.dtype, numel):
            raise _Declined("one storage, two types")
        return known

    def load(self) -> object:  # one branch per opcode, as torch's
        from struct import unpack

        OrderedDict = collections.OrderedDict

        stack: list[Any] = []
        metastack: list[list[Any]] = []
        memo: dict[int, Any] = {}
        read = self.read

        def pop_mark() -> list[Any]:
            nonlocal stack
            items = stack
            stack = metastack.pop()
            return items

        while True:
            op = read(1)[0]
            if op == 0x63:  # GLOBAL
                stack.append(self.find_class())
            elif op == 0x52:  # REDUCE
                args = stack.pop()
                func = stack[-1]
                if type(args) is not tuple:
                    raise _Declined("reduce arguments")
                if type(func) is _InertClass:
                    stack[-1] = InertObject(func.name, args)
                    continue
                if func not in (_ordered_dict, _rebuild_tensor_v2, _rebuild_parameter):
                    raise _Declined("reduce")
                stack[-1] = func(*args)
            elif op == 0x81 and self.inert:  # NEWOBJ of an inert class only
                args = stack.pop()
                if type(stack[-1]) is not _InertClass or type(args) is not tuple:
                    raise _Declined("newobj")
                stack[-1] = InertObject(stack[-1].name, args)
            elif op == 0x62:  # BUILD: attributes of an OrderedDict (a state_dict's _metadata)
                state = stack.pop()
                if type(stack[-1]) is InertObject and type(state) is dict:
                    stack[-1].state = state
                    continue
                if type(stack[-1]) is not OrderedDict or type(state) is not dict:
                    raise _Declined("build")
            elif op == 0x61:  # APPEND
                item = stack.pop()
                if type(stack[-1]) is not list:
                    raise _Declined("append")
                stack[-1].append(item)
            elif op == 0x65:  # APPENDS
                items = pop_mark()
                if type(stack[-1]) is not list:
                    raise _Declined("appends")
                stack[-1].extend(items)
            elif op == 0x73:  # SETITEM
                v, k = stack.pop(), stack.pop()
                if type(stack[-1]) not in (dict, OrderedDict):
                    raise _Declined("setitem")
                stack[-1][k] = v
            elif op == 0x75:  # SETITEMS
                items = pop_mark()
                if type(stack[-1]) not in (dict, OrderedDict) or len(items) % 2:
                    raise _Declined("setitems")
                for i in range(0, len(items), 2):
                    stack[-1][items[i]] = items[i + 1]
            elif op == 0x28:  # MARK
                metastack.append(stack)
                stack = []
            elif op == 0x74:  # TUPLE
                items = pop_mark()
                stack.append(tuple(items))
            elif op == 0x85:  # TUPLE1
                stack[-1] = (stack[-1],)
            elif op == 0x86:  # TUPLE2
                stack[-2:] = [(stack[-2], stack[-1])]
            elif op == 0x87:  # TUPLE3
                stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
            elif op == 0x4E:  # NONE
                stack.append(None)
            elif op == 0x89:  # NEWFALSE
                stack.append(False)
            elif op == 0x88:  # NEWTRUE
                stack.append(True)
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op == 0x5D:  # EMPTY_LIST
                stack.append([])
            elif op == 0x7D:  # EMPTY_DICT
                stack.append({})
            elif op == 0x4A:  # BININT
                stack.append(unpack("<i", read(4))[0])
            elif op == 0x4B:  # BININT1
                stack.append(read(1)[0])
            elif op == 0x4D:  # BININT2
                stack.append(unpack("<H", read(2))[0])
            elif op == 0x47:  # BINFLOAT
                stack.append(unpack(">d", read(8))[0])
            elif op == 0x58:  # BINUNICODE
                n = unpack("<I", read(4))[0]
                stack.append(str(read(n), "utf-8", "surrogatepass"))
            elif op == 0x51:  # BINPERSID
                stack.append(self.persistent_load(stack.pop()))
            elif op == 0x68:  # BINGET
                stack.append(memo[read(1)[0]])
            elif op == 0x6A:  # LONG_BINGET
                stack.append(memo[unpack("<I", read(4))[0]])
            elif op == 0x71:  # BINPUT
                memo[read(1)[0]] = stack[-1]
            elif op == 0x72:  # LONG_BINPUT
                memo[unpack("<I", read(4))[0]] = stack[-1]
            elif op == 0x8A:  # LONG1
                n = read(1)[0]
                stack.append(int.from_bytes(read(n), "little", signed=True))
            elif op == 0x80:  # PROTO
                read(1)
            elif op == 0x2E:  # STOP
                return stack.pop()
            else:  # NEWOBJ, sets, bytes, old strings...: torch decides
                raise _Declined(f"opcode {op:#x}")


_PLAIN_KEYS = (str, int, bool, float, type(None))
_PLAIN_LEAVES = (*_PLAIN_KEYS, dict, list, tuple, collections.OrderedDict)  # empty ones


def _flatten_pickled(obj: object, prefix: str, out: dict[str, object]) -> None:
    """:func:`_flatten` over what :class:`_WeightsUnpickler` built."""
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            if type(key) not in _PLAIN_KEYS:
                raise _Declined("a key whose text torch would write differently")
            _flatten_pickled(value, _join(prefix, _key(key)), out)
    elif isinstance(obj, list | tuple) and obj:
        for index, value in enumerate(obj):
            _flatten_pickled(value, _join(prefix, str(index)), out)
    else:
        if not isinstance(obj, _PickledTensor) and type(obj) not in _PLAIN_LEAVES:
            raise _Declined("a leaf of another type")
        name = prefix or ROOT_NAME
        if name in out:
            raise _Declined("two leaves, one name")
        out[name] = obj


def _dense(t: torch.Tensor) -> torch.Tensor:
    import torch

    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous()


def _le_bytes(t: torch.Tensor) -> memoryview:
    """The tensor's bytes in little-endian order, without a copy on little-endian hosts."""
    import torch

    raw = t.reshape(-1).view(torch.uint8).numpy()
    if sys.byteorder != "little" and t.element_size() > 1:
        word = t.element_size() // (2 if t.is_complex() else 1)
        raw = raw.reshape(-1, word)[:, ::-1].reshape(-1).copy()
    return raw.data


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _canonical_value(v: object) -> str:
    """Type-tagged, container-independent text for a non-tensor leaf."""
    if v is None:
        return "none"
    if isinstance(v, Mapping):
        return "dict:{}"  # only empty mappings are leaves
    if isinstance(v, bytes | bytearray):
        return f"bytes:{bytes(v).hex()}"
    if isinstance(v, str):
        return f"str:{v}"
    if isinstance(v, bool | int | float | complex):
        return f"{type(v).__name__}:{v!r}"
    if type(v) in (list, tuple):
        return "list:[]"  # only empty sequences are leaves
    return f"{type(v).__module__}.{type(v).__qualname__}:{v!r}"


def _value_type(v: object) -> str:
    return f"py:{type(v).__name__}"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TensorDiff:
    """How one leaf compares. Diff numbers are None where they cannot be computed.

    ``rel_l2`` is ||a-b|| / ||a|| (0 when both are 0, inf when only ||a|| is);
    ``n_unequal`` counts elements whose values differ (NaN against NaN counts as equal);
    a non-finite mismatch (NaN or inf against anything else) makes the diffs ``inf``.
    Two float32 tensors are subtracted in float32 (exact for values within 2x of each
    other), anything else in float64; integers beyond 2**53 make ``max_abs_diff``
    approximate, never ``n_unequal``. Equal tensors report zeros.
    """

    name: str
    status: Status
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: tuple[int, ...] | None = None
    shape_b: tuple[int, ...] | None = None
    numel: int | None = None
    max_abs_diff: float | None = None
    rel_l2: float | None = None
    n_unequal: int | None = None
    within_tolerance: bool = False
    value_a: str | None = None
    value_b: str | None = None
    note: str | None = None
    state: str | None = None
    """What the comparison judged this tensor (``compare.states``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "dtype_a": self.dtype_a,
            "dtype_b": self.dtype_b,
            "shape_a": None if self.shape_a is None else list(self.shape_a),
            "shape_b": None if self.shape_b is None else list(self.shape_b),
            "numel": self.numel,
            "max_abs_diff": _json_float(self.max_abs_diff),
            "rel_l2": _json_float(self.rel_l2),
            "n_unequal": self.n_unequal,
            "within_tolerance": self.within_tolerance,
            "value_a": self.value_a,
            "value_b": self.value_b,
            "note": self.note,
        } | ({"state": self.state} if self.state is not None else {})


@dataclass(frozen=True)
class CheckpointDiff:
    """Every leaf of two checkpoints compared, with a summary.

    ``same_tensors``: every leaf bitwise equal, nothing missing (when the file hashes differ
    too, that is "same tensors, different container"). ``within_tolerance``: nothing
    missing, no shape mismatch, and every leaf equal or within rtol/atol (a dtype change
    whose values agree counts as within; ``n_mismatch`` still reports it).
    """

    a: str
    b: str
    rtol: float
    atol: float
    tensors: tuple[TensorDiff, ...]
    n_equal: int
    n_close: int
    n_differ: int
    n_mismatch: int
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    worst: tuple[TensorDiff, ...]
    same_tensors: bool
    within_tolerance: bool
    bytes_compared: int = field(default=0)
    metadata: tuple[TensorDiff, ...] = ()
    """The leaves that are neither a tensor nor a number (callback state, ``dirpath``
    strings, None), compared as metadata and reported apart: the tensors (and numbers)
    decide ``same_tensors`` and ``within_tolerance``.  Paths that differ only by the
    run's own folder are equal."""

    @property
    def metadata_differ(self) -> tuple[TensorDiff, ...]:
        return tuple(e for e in self.metadata if e.status not in ("equal", "close"))

    def headline(self, *, files_identical: bool | None = None) -> str:
        """One line for a report; pass whether the file sha256s match if known."""
        if self.same_tensors:
            meta = self.metadata_differ
            if meta:
                shown = ", ".join(e.name for e in meta[:3]) + (" …" if len(meta) > 3 else "")
                return f"same tensors; metadata differs ({len(meta)}: {shown})"
            if files_identical is False:
                return "same tensors, different container"
            return "identical tensors"
        parts = []
        if self.n_differ:
            parts.append(f"{self.n_differ} differ")
        if self.n_close:
            parts.append(f"{self.n_close} close")
        if self.n_mismatch:
            parts.append(f"{self.n_mismatch} shape/dtype mismatch")
        if self.only_a:
            parts.append(f"{len(self.only_a)} only in A")
        if self.only_b:
            parts.append(f"{len(self.only_b)} only in B")
        verdict = "within tolerance" if self.within_tolerance else "outside tolerance"
        tol = f"rtol={self.rtol:g}, atol={self.atol:g}"
        meta = self.metadata_differ
        also = (
            f"; metadata: {len(meta)} entr{'y' if len(meta) == 1 else 'ies'} differ" if meta else ""
        )
        return f"{verdict} ({tol}): {', '.join(parts)}; {self.n_equal} equal{also}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "rtol": self.rtol,
            "atol": self.atol,
            "same_tensors": self.same_tensors,
            "within_tolerance": self.within_tolerance,
            "n_equal": self.n_equal,
            "n_close": self.n_close,
            "n_differ": self.n_differ,
            "n_mismatch": self.n_mismatch,
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "bytes_compared": self.bytes_compared,
            "worst": [t.to_dict() for t in self.worst],
            "tensors": [t.to_dict() for t in self.tensors],
        } | ({"metadata": [t.to_dict() for t in self.metadata]} if self.metadata else {})


def _json_float(x: float | None) -> float | str | None:
    """Strict JSON has no inf/nan: those become the strings "inf", "-inf", "nan"."""
    if x is None or math.isfinite(x):
        return x
    return str(x)


# --------------------------------------------------------------------------- comparing


def compare_checkpoints(
    a: str | Path,
    b: str | Path,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    top: int = 10,
) -> CheckpointDiff:
    """Compare two checkpoints leaf by leaf.

    Tolerance as ``torch.allclose``: |a-b| <= atol + rtol*|b|; integer and bool tensors
    compare exactly. Each pair is first tested for bitwise equality on the memory-mapped
    tensors (memcmp); the difference pass runs only for pairs that are not equal, chunk by
    chunk into buffers reused across tensors. Neither checkpoint is held whole in memory.
    """
    import torch

    work = _Workspace()
    entries: list[TensorDiff] = []
    meta: list[TensorDiff] = []  # leaves that are no tensor on either side
    nbytes = 0
    with open_checkpoint(a) as ca, open_checkpoint(b) as cb, _one_torch_thread():
        names_a, names_b = set(ca.names()), set(cb.names())
        for name in sorted(names_a | names_b):
            if name not in names_b:
                leaf = ca.leaf(name)
                to = meta if _is_metadata(leaf) else entries
                to.append(_one_sided(name, leaf, "only_a"))
                continue
            if name not in names_a:
                leaf = cb.leaf(name)
                to = meta if _is_metadata(leaf) else entries
                to.append(_one_sided(name, leaf, "only_b"))
                continue
            la, lb = ca.leaf(name), cb.leaf(name)
            if isinstance(la, torch.Tensor) and isinstance(lb, torch.Tensor):
                entries.append(_compare_tensors(name, la, lb, rtol, atol, work))
                nbytes += _nbytes(la) + _nbytes(lb)
            elif isinstance(la, torch.Tensor) or isinstance(lb, torch.Tensor):
                entries.append(_tensor_vs_value(name, la, lb))
            elif _is_metadata(la) or _is_metadata(lb):
                meta.append(_compare_metadata(name, la, lb, rtol, atol))
            else:  # numbers (a step count, a learning rate): judged as today
                entries.append(_compare_values(name, la, lb, rtol, atol))
    if not entries and meta:  # no tensor at all: the values are what it holds
        entries, meta = meta, []
    diff = _summarise(str(a), str(b), rtol, atol, top, entries, nbytes)
    return replace(diff, metadata=tuple(meta)) if meta else diff


def _is_metadata(leaf: object) -> bool:
    """A leaf that is neither a tensor nor a number: text, None, an empty container
    (callback state, ``dirpath`` strings)."""
    import torch

    return not isinstance(leaf, torch.Tensor) and _as_number(leaf) is None


def _compare_metadata(name: str, va: object, vb: object, rtol: float, atol: float) -> TensorDiff:
    """A leaf that is no tensor: as :func:`_compare_values`, and two path strings that
    differ only by the folder each run ran in (``/tmp/replay-…/out/x`` and
    ``/home/me/repo/out/x``; ``version_0`` and ``version_1`` of a Lightning log) equal."""
    d = _compare_values(name, va, vb, rtol, atol)
    if d.status in ("equal", "close") or not (isinstance(va, str) and isinstance(vb, str)):
        return d
    if _same_but_run_folder(va, vb):
        return replace(
            d,
            status="equal",
            max_abs_diff=0.0,
            rel_l2=0.0,
            n_unequal=0,
            within_tolerance=True,
            note="paths that differ only by the run's own folder",
        )
    return d


_RUN_UNIQUE = re.compile(
    r"(?<![^/])(version_\d+|checkpoint-\d+|events\.out\.tfevents\.[^/]+)(?![^/])"
)


def _same_but_run_folder(a: str, b: str) -> bool:
    """Whether two strings are paths to the same thing in two runs' folders: equal once
    the parts a framework numbers per run are patterns, or both absolute and equal
    after their differing leading folders (the common tail has at least two parts)."""
    if "/" not in a or "/" not in b or "\n" in a or "\n" in b:
        return False
    na, nb = _RUN_UNIQUE.sub("*", a), _RUN_UNIQUE.sub("*", b)
    if na == nb:
        return True
    if not (na.startswith("/") and nb.startswith("/")):
        return False
    pa, pb = na.split("/"), nb.split("/")
    tail = 0
    while tail < min(len(pa), len(pb)) and pa[-1 - tail] == pb[-1 - tail]:
        tail += 1
    return tail >= 2 and tail < min(len(pa), len(pb))


def _summarise(
    a: str,
    b: str,
    rtol: float,
    atol: float,
    top: int,
    entries: list[TensorDiff],
    nbytes: int,
) -> CheckpointDiff:
    def count(*statuses: Status) -> int:
        return sum(1 for e in entries if e.status in statuses)

    only_a = tuple(e.name for e in entries if e.status == "only_a")
    only_b = tuple(e.name for e in entries if e.status == "only_b")
    ranked = [
        e
        for e in entries
        if e.status in ("close", "differs", "dtype_mismatch")
        and e.rel_l2 is not None
        and (e.n_unequal or 0) > 0
    ]
    ranked.sort(key=lambda e: (_rank(e.rel_l2), _rank(e.max_abs_diff)), reverse=True)
    return CheckpointDiff(
        a=a,
        b=b,
        rtol=rtol,
        atol=atol,
        tensors=tuple(entries),
        n_equal=count("equal"),
        n_close=count("close"),
        n_differ=count("differs"),
        n_mismatch=count("shape_mismatch", "dtype_mismatch"),
        only_a=only_a,
        only_b=only_b,
        worst=tuple(ranked[: max(top, 0)]),
        same_tensors=all(e.status == "equal" for e in entries),
        within_tolerance=all(e.within_tolerance for e in entries),
        bytes_compared=nbytes,
    )


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch ops on the calling thread only, for the duration.

    The chunk kernels work on cache-sized buffers, where intra-op threads gain nothing,
    and on a busy 2-core host each parallel region waits for a descheduled peer: measured
    3-10x slower wall time with 2 threads, near-memory speed with 1.
    """
    import torch

    previous = torch.get_num_threads()
    if previous != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if previous != 1:
            torch.set_num_threads(previous)


def _rank(x: float | None) -> float:
    return -math.inf if x is None else math.inf if math.isnan(x) else x


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _one_sided(name: str, leaf: object, status: Status) -> TensorDiff:
    import torch

    if isinstance(leaf, torch.Tensor):
        dtype, shape, value = _dtype_name(leaf), tuple(leaf.shape), None
    else:
        dtype, shape, value = _value_type(leaf), None, _short_repr(leaf)
    if status == "only_a":
        return TensorDiff(name, status, dtype_a=dtype, shape_a=shape, value_a=value)
    return TensorDiff(name, status, dtype_b=dtype, shape_b=shape, value_b=value)


def _tensor_vs_value(name: str, la: object, lb: object) -> TensorDiff:
    import torch

    def side(v: object) -> tuple[str, tuple[int, ...] | None, str | None]:
        if isinstance(v, torch.Tensor):
            return _dtype_name(v), tuple(v.shape), None
        return _value_type(v), None, _short_repr(v)

    (da, sa, va), (db, sb, vb) = side(la), side(lb)
    return TensorDiff(
        name,
        "dtype_mismatch",
        dtype_a=da,
        dtype_b=db,
        shape_a=sa,
        shape_b=sb,
        value_a=va,
        value_b=vb,
        note="a tensor on one side, a plain value on the other",
    )


def _compare_tensors(
    name: str,
    a: torch.Tensor,
    b: torch.Tensor,
    rtol: float,
    atol: float,
    work: _Workspace,
) -> TensorDiff:
    shape_a, shape_b = tuple(a.shape), tuple(b.shape)
    result = TensorDiff(
        name,
        "shape_mismatch",
        dtype_a=_dtype_name(a),
        dtype_b=_dtype_name(b),
        shape_a=shape_a,
        shape_b=shape_b,
    )
    if shape_a != shape_b:
        return result
    result = replace(result, numel=a.numel())
    same_dtype = a.dtype == b.dtype
    if same_dtype and _bitwise_equal(a, b):
        return replace(
            result, status="equal", max_abs_diff=0.0, rel_l2=0.0, n_unequal=0, within_tolerance=True
        )
    status: Status = "differs" if same_dtype else "dtype_mismatch"
    try:
        stats = _diff_stats(a, b, rtol, atol, work)
    except (RuntimeError, TypeError) as e:  # a dtype torch cannot convert to float64
        return replace(result, status=status, note=f"difference not computed: {_first_line(e)}")
    if same_dtype and stats.within:
        status = "close"
    return replace(
        result,
        status=status,
        max_abs_diff=stats.max_abs,
        rel_l2=stats.rel_l2,
        n_unequal=stats.n_unequal,
        within_tolerance=stats.within,
    )


def _compare_values(name: str, va: object, vb: object, rtol: float, atol: float) -> TensorDiff:
    ta, tb = _value_type(va), _value_type(vb)
    result = TensorDiff(
        name,
        "dtype_mismatch" if ta != tb else "differs",
        dtype_a=ta,
        dtype_b=tb,
        value_a=_short_repr(va),
        value_b=_short_repr(vb),
    )
    if _canonical_value(va) == _canonical_value(vb):
        return replace(
            result, status="equal", max_abs_diff=0.0, rel_l2=0.0, n_unequal=0, within_tolerance=True
        )
    x, y = _as_number(va), _as_number(vb)
    if x is None or y is None:
        return result
    same = x == y or (math.isnan(x) and math.isnan(y))
    diff = 0.0 if same else abs(x - y)
    if math.isnan(diff):
        diff = math.inf
    exact = isinstance(va, int) and isinstance(vb, int)
    within = same or (not exact and math.isfinite(diff) and diff <= atol + rtol * abs(y))
    norm = abs(x) if math.isfinite(x) else 0.0
    rel = diff / norm if norm else (0.0 if diff == 0 else math.inf)
    return replace(
        result,
        status="close" if within and ta == tb else result.status,
        max_abs_diff=diff,
        rel_l2=rel,
        n_unequal=0 if same else 1,
        within_tolerance=within,
    )


def _as_number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _short_repr(v: object) -> str:
    text = repr(v)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 1] + "…"


# --------------------------------------------------------------------------- kernels


@functools.cache
def _memcmp() -> Callable[[int, int, int], int] | None:
    """libc memcmp (about twice the speed of ``torch.equal`` here), or None where absent."""
    try:
        libc = ctypes.CDLL(None)
        fn = libc.memcmp
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype and shape assumed. Bitwise, so NaN matches the identical NaN."""
    import torch

    a, b = _dense(a), _dense(b)
    nbytes = _nbytes(a)
    if nbytes == 0:
        return True
    memcmp = _memcmp()
    if memcmp is not None:
        return memcmp(a.data_ptr(), b.data_ptr(), nbytes) == 0
    word = next(
        dt
        for dt, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2), (torch.uint8, 1))
        if nbytes % size == 0 and a.data_ptr() % size == 0 and b.data_ptr() % size == 0
    )
    wa = a.reshape(-1).view(torch.uint8).view(word)
    wb = b.reshape(-1).view(torch.uint8).view(word)
    return bool(torch.equal(wa, wb))


class _Workspace:
    """Chunk buffers per dtype, allocated on first use and reused for every tensor."""

    def __init__(self, chunk: int = _CHUNK) -> None:
        self.chunk = chunk
        self._bufs: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._mask: np.ndarray[Any, np.dtype[np.bool_]] | None = None

    def buffers(self, dtype: torch.dtype, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if dtype not in self._bufs:
            self._bufs[dtype] = (
                torch.empty(self.chunk, dtype=dtype),
                torch.empty(self.chunk, dtype=dtype),
            )
        x, y = self._bufs[dtype]
        return x[:n], y[:n]

    def mask(self, n: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """A bool buffer for element tests (numpy counts bools several times faster)."""
        import numpy as np

        if self._mask is None:
            self._mask = np.empty(self.chunk, dtype=np.bool_)
        return self._mask[:n]


@dataclass
class _Stats:
    max_abs: float = 0.0
    sum_sq_diff: float = 0.0
    sum_sq_a: float = 0.0
    n_unequal: int = 0
    within: bool = True

    @property
    def rel_l2(self) -> float:
        if self.sum_sq_a == 0.0:
            return 0.0 if self.sum_sq_diff == 0.0 else math.inf
        return math.sqrt(self.sum_sq_diff) / math.sqrt(self.sum_sq_a)


def _diff_stats(
    a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, work: _Workspace
) -> _Stats:
    """Differences of same-shape tensors, chunk by chunk, into reused buffers.

    Two float32 (or two float64) tensors are subtracted in their own dtype straight from
    the mapped file (a difference of close floats is exact); anything else (half types,
    mixed dtypes, integers) is first converted chunk-wise into float64 buffers.
    """
    import torch

    if a.is_complex() or b.is_complex():  # compare real and imaginary parts as floats
        a = torch.view_as_real(a.to(torch.complex128).resolve_conj())
        b = torch.view_as_real(b.to(torch.complex128).resolve_conj())
    exact = not (a.is_floating_point() or b.is_floating_point())
    direct = a.dtype == b.dtype and a.dtype in (torch.float32, torch.float64)
    fa, fb = _dense(a).reshape(-1), _dense(b).reshape(-1)
    stats = _Stats()
    n = fa.numel()
    for start in range(0, n, work.chunk):
        stop = min(n, start + work.chunk)
        ca, cb = fa[start:stop], fb[start:stop]
        counted = stats.n_unequal
        mask = work.mask(stop - start)
        if direct:
            d, t = work.buffers(a.dtype, stop - start)
            done = _fast_chunk(ca, cb, d, t, mask, rtol, atol, stats)
        else:
            x, y = work.buffers(torch.float64, stop - start)
            x.copy_(ca)
            y.copy_(cb)
            done = _fast_chunk(x, y, x, y, mask, rtol, atol, stats)
        if not done:
            x, y = work.buffers(torch.float64, stop - start)
            x.copy_(ca)
            y.copy_(cb)
            _careful_chunk(x, y, rtol, atol, stats)
        if exact:  # float64 cannot tell int64s beyond 2**53 apart: count on the originals
            stats.n_unequal = counted + _count_unequal(ca, cb, mask)
    if exact:
        stats.within = stats.n_unequal == 0
    return stats


def _fast_chunk(
    xa: torch.Tensor,
    xb: torch.Tensor,
    d: torch.Tensor,
    t: torch.Tensor,
    mask: np.ndarray[Any, np.dtype[np.bool_]],
    rtol: float,
    atol: float,
    s: _Stats,
) -> bool:
    """Chunk whose values are all finite: a few cache-resident passes; ``d``/``t`` may alias.

    Returns False, having added nothing, when a NaN, an inf or an overflow shows up. The
    tolerance pass (|a-b| - rtol*|b| against atol) is skipped where its answer is already
    known: an earlier chunk broke the tolerance, or no difference exceeds atol at all.
    """
    import numpy as np
    import torch

    sum_sq_a = float(torch.dot(xa, xa))
    torch.sub(xa, xb, out=d)
    sum_sq_diff = float(torch.dot(d, d))
    d.abs_()
    max_abs = float(torch.amax(d))
    if not (math.isfinite(max_abs) and math.isfinite(sum_sq_a) and math.isfinite(sum_sq_diff)):
        return False
    if sum_sq_a == 0.0 or (sum_sq_diff == 0.0 and max_abs > 0.0):
        return False  # zeros or squares that underflowed: redo in float64 with care
    n_unequal = int(np.count_nonzero(np.not_equal(d.numpy(), 0, out=mask)))
    within = s.within
    if within and max_abs > atol:  # |a-b| <= atol everywhere: within, whatever rtol says
        torch.abs(xb, out=t)
        torch.sub(d, t, alpha=rtol, out=t)  # |a-b| - rtol*|b|
        within = float(torch.amax(t)) <= atol
    s.sum_sq_a += sum_sq_a
    s.sum_sq_diff += sum_sq_diff
    s.max_abs = max(s.max_abs, max_abs)
    s.n_unequal += n_unequal
    s.within = within
    return True


def _count_unequal(
    a: torch.Tensor, b: torch.Tensor, mask: np.ndarray[Any, np.dtype[np.bool_]]
) -> int:
    """Elements that differ between two same-length 1-D chunks (exact for integers)."""
    import numpy as np
    import torch

    if a.dtype == b.dtype:  # mixed dtypes: torch's promotion rules, as before
        try:
            na, nb = a.numpy(), b.numpy()
        except (TypeError, RuntimeError):  # a dtype numpy lacks
            pass
        else:
            return int(np.count_nonzero(np.not_equal(na, nb, out=mask)))
    return int(torch.ne(a, b).sum())


def _careful_chunk(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float, s: _Stats) -> None:
    """Chunk with NaN or inf: matching NaNs/infs are equal, any other non-finite is inf apart."""
    import torch

    finite = torch.isfinite(x) & torch.isfinite(y)
    same = torch.eq(x, y) | (torch.isnan(x) & torch.isnan(y))
    fx = torch.where(torch.isfinite(x), x, 0.0)
    s.sum_sq_a += float(torch.dot(fx, fx))
    allowed = y.abs().mul_(rtol).add_(atol)
    torch.sub(x, y, out=x)
    x.abs_()
    x.masked_fill_(same, 0.0)
    x.masked_fill_(~same & ~finite, math.inf)
    s.max_abs = max(s.max_abs, float(x.max()))
    s.sum_sq_diff += float(torch.dot(x, x))
    s.n_unequal += int((~same).sum())
    violates = ~same & (~finite | (x > allowed))
    s.within = s.within and not bool(violates.any())
