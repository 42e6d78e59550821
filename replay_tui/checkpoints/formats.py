"""What a checkpoint file is: the suffixes that name one, its format (a ``torch.save``
file or safetensors) told from its first bytes, and the error every reader raises."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:
    import mmap

    Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
    """A checkpoint's bytes as a reader takes them (a memory map of a checked descriptor)."""

CHECKPOINT_SUFFIXES = frozenset({".safetensors", ".pt", ".pth", ".ckpt", ".bin"})
Format = Literal["safetensors", "torch"]


class CheckpointError(Exception):
    """A checkpoint could not be opened safely (missing, corrupt, or holding arbitrary objects)."""


def is_checkpoint(path: str | Path) -> bool:
    """Whether the file name says checkpoint (by suffix; the content is not read)."""
    return Path(path).suffix.lower() in CHECKPOINT_SUFFIXES


def detect_format(path: Path) -> Format:
    """The file's format: by its suffix where it says safetensors, else by its first bytes
    (``.bin`` is either).  Raises ``CheckpointError`` where the file cannot be read."""
    if path.suffix.lower() == ".safetensors":
        return "safetensors"
    try:
        with path.open("rb") as f:
            head = f.read(9)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from e
    return _format_of_head(head)


def buffer_format(path: Path, view: memoryview) -> Format:
    """:func:`detect_format` on bytes already read."""
    if path.suffix.lower() == ".safetensors":
        return "safetensors"
    return _format_of_head(bytes(view[:9]))


def _format_of_head(head: bytes) -> Format:
    # safetensors: little-endian u64 header length, then a JSON object.
    if len(head) == 9 and head[8:9] == b"{" and not head.startswith(b"PK"):
        return "safetensors"
    return "torch"


def first_line(e: BaseException) -> str:
    """The first line of an error's text (its type's name where it has none), for a
    message that names a checkpoint and why it was refused."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
