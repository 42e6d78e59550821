"""The restricted unpickler of ``torch.save`` pickles, without torch.

The part of torch's weights-only unpickler (``torch/_weights_only_unpickler.py``) that
``torch.save`` of tensors in plain containers uses: the same opcodes with the same
checks, and a few globals (``OrderedDict``, the tensor and parameter rebuilders, the
legacy storage classes).  It builds placeholders (:class:`PickledStorage`,
:class:`PickledTensor`), never a torch object, and it never imports or calls a global:
one of a module the caller names inert becomes an :class:`InertObject` holding its name,
arguments and state.  Whatever else it meets it declines (:class:`Declined`), and
torch decides.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any


class Declined(Exception):
    """Not a file the torch-free readers know: torch reads it."""


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


@dataclass(frozen=True)
class PickledStorage:
    """A storage a persistent id named: its record (``data/<key>``), dtype, element size
    and length in elements."""

    key: str
    dtype: str
    itemsize: int
    numel: int


class PickledTensor:
    """A tensor of a storage: contiguous (others are declined), within the storage."""

    __slots__ = ("offset", "size", "storage")

    def __init__(self, storage: PickledStorage, offset: int, size: tuple[int, ...]) -> None:
        self.storage = storage
        self.offset = offset
        self.size = size

    def __reduce__(self) -> Any:
        raise Declined("not picklable")


class _StorageType:
    __slots__ = ("dtype", "itemsize")

    def __init__(self, dtype: str, itemsize: int) -> None:
        self.dtype = dtype
        self.itemsize = itemsize


def _ints(v: object) -> tuple[int, ...]:
    if type(v) is not tuple or not all(type(x) is int for x in v):
        raise Declined("not a tuple of ints")
    return v


def _rebuild_tensor_v2(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    requires_grad: object,
    backward_hooks: object,
    metadata: object = None,
) -> PickledTensor:
    """torch._utils._rebuild_tensor_v2, for a contiguous tensor in bounds."""
    if not isinstance(storage, PickledStorage) or type(offset) is not int or offset < 0:
        raise Declined("storage")
    shape, strides = _ints(size), _ints(stride)
    if len(shape) != len(strides) or any(d < 0 for d in shape) or metadata:
        raise Declined("size, stride or metadata")
    if type(requires_grad) is not bool or (requires_grad and storage.dtype not in _GRAD_DTYPES):
        raise Declined("requires_grad")
    numel = math.prod(shape)
    expected = 1
    for d, st in zip(reversed(shape), reversed(strides), strict=True):
        if d != 1:
            if st != expected:
                raise Declined("not contiguous: torch gathers it")
            expected *= d
    if offset + numel > storage.numel:
        raise Declined("out of the storage")
    return PickledTensor(storage, offset, shape)


def _rebuild_parameter(data: object, requires_grad: object, backward_hooks: object) -> object:
    if not isinstance(data, PickledTensor) or type(requires_grad) is not bool:
        raise Declined("parameter")
    if requires_grad and data.storage.dtype not in _GRAD_DTYPES:
        raise Declined("requires_grad")
    return data


def _ordered_dict(*args: object) -> object:
    if args:
        raise Declined("OrderedDict with arguments")
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


class WeightsUnpickler:
    """The part of torch's weights-only unpickler (torch/_weights_only_unpickler.py) that
    ``torch.save`` of tensors in plain containers uses: the same opcodes with the same
    checks, and a few globals.  It builds placeholders, never a torch object."""

    def __init__(
        self,
        data: bytes,
        storages: dict[str, PickledStorage],
        inert: frozenset[str] = frozenset(),
    ) -> None:
        self.data = data
        self.pos = 0
        self.storages = storages
        self.inert = inert  # modules whose globals become inert records (never imported)

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        if len(out) != n:
            raise Declined("truncated pickle")
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
        raise Declined(f"global {full}")

    def persistent_load(self, pid: object) -> PickledStorage:
        if type(pid) is not tuple or len(pid) != 5:
            raise Declined("persistent id")
        typename, storage_type, key, _location, numel = pid
        if isinstance(typename, bytes):
            typename = typename.decode("ascii")
        if typename != "storage" or not isinstance(storage_type, _StorageType):
            raise Declined("not a storage")
        if type(key) is not str or type(numel) is not int or numel < 0:
            raise Declined("storage key")
        known = self.storages.get(key)
        if known is None:
            known = PickledStorage(key, storage_type.dtype, storage_type.itemsize, numel)
            self.storages[key] = known
        elif (known.dtype, known.numel) != (storage_type.dtype, numel):
            raise Declined("one storage, two types")
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
                    raise Declined("reduce arguments")
                if type(func) is _InertClass:
                    stack[-1] = InertObject(func.name, args)
                    continue
                if func not in (_ordered_dict, _rebuild_tensor_v2, _rebuild_parameter):
                    raise Declined("reduce")
                stack[-1] = func(*args)
            elif op == 0x81 and self.inert:  # NEWOBJ of an inert class only
                args = stack.pop()
                if type(stack[-1]) is not _InertClass or type(args) is not tuple:
                    raise Declined("newobj")
                stack[-1] = InertObject(stack[-1].name, args)
            elif op == 0x62:  # BUILD: attributes of an OrderedDict (a state_dict's _metadata)
                state = stack.pop()
                if type(stack[-1]) is InertObject and type(state) is dict:
                    stack[-1].state = state
                    continue
                if type(stack[-1]) is not OrderedDict or type(state) is not dict:
                    raise Declined("build")
            elif op == 0x61:  # APPEND
                item = stack.pop()
                if type(stack[-1]) is not list:
                    raise Declined("append")
                stack[-1].append(item)
            elif op == 0x65:  # APPENDS
                items = pop_mark()
                if type(stack[-1]) is not list:
                    raise Declined("appends")
                stack[-1].extend(items)
            elif op == 0x73:  # SETITEM
                v, k = stack.pop(), stack.pop()
                if type(stack[-1]) not in (dict, OrderedDict):
                    raise Declined("setitem")
                stack[-1][k] = v
            elif op == 0x75:  # SETITEMS
                items = pop_mark()
                if type(stack[-1]) not in (dict, OrderedDict) or len(items) % 2:
                    raise Declined("setitems")
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
                raise Declined(f"opcode {op:#x}")
