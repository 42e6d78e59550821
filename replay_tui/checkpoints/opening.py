"""Opening a checkpoint with torch or safetensors, never unpickling arbitrary objects:
its sorted leaf names, each tensor memory-mapped and loaded when asked for, and the
dense CPU view of a tensor that digests and comparisons read."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.checkpoints.formats import CheckpointError, Format, detect_format, first_line
from replay_tui.checkpoints.leaves import ROOT_NAME, join_name, key_name

if TYPE_CHECKING:
    import torch


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
    if detect_format(p) == "safetensors":
        return _open_safetensors(p)
    return _open_torch(p)


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
        raise CheckpointError(f"{path}: not a loadable torch checkpoint: {first_line(e)}") from e
    leaves: dict[str, object] = {}
    _flatten(obj, "", leaves, path)
    names = sorted(leaves)
    return Checkpoint(path, "torch", names, leaves.__getitem__, leaves.clear)


def _unpickling_reason(e: pickle.UnpicklingError) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    if "Weights only load failed" not in text:
        return f"not a loadable torch checkpoint: {first_line(e)}"
    match = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
    detail = match.group(1) if match else "it holds objects other than tensors and containers"
    detail = detail.split(" Please use ")[0]
    if detail.startswith("Unsupported operand"):
        detail += " (corrupt, or not a torch checkpoint)"
    return f"refused by safe loading (torch.load weights_only=True), nothing unpickled: {detail}"


def _flatten(obj: object, prefix: str, out: dict[str, object], path: Path) -> None:
    """Nested dicts/lists/tuples to dotted names; list indices become numbers."""
    import torch

    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            _flatten(value, join_name(prefix, key_name(key)), out, path)
    elif isinstance(obj, list | tuple) and not isinstance(obj, torch.Size) and obj:
        for index, value in enumerate(obj):
            _flatten(value, join_name(prefix, str(index)), out, path)
    else:
        name = prefix or ROOT_NAME
        if name in out:
            raise CheckpointError(f"{path}: two leaves flatten to the same name {name!r}")
        out[name] = obj


def dense(t: torch.Tensor) -> torch.Tensor:
    """The tensor detached, strided, on the CPU and contiguous (no copy where it is)."""
    import torch

    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous()


def dtype_name(t: torch.Tensor) -> str:
    """The tensor's dtype as the digest and the comparison write it (``float32``)."""
    return str(t.dtype).removeprefix("torch.")
