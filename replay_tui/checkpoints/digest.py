"""A checkpoint's tensor-content digest: the same state_dict saved as ``a.pt``, ``b.pt``
or ``.safetensors`` gives the same value, where the file's sha256 depends on its
container (``torch.save`` names the zip folder after the file stem).

Given the file's bytes, the torch-free reader (:mod:`replay_tui.checkpoints.reader`)
digests what it knows without importing torch; anything else goes through torch.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from replay_tui.checkpoints.leaves import canonical_value
from replay_tui.checkpoints.opening import dense, dtype_name, open_checkpoint
from replay_tui.checkpoints.reader import TensorSpan, leaves_without_torch

if TYPE_CHECKING:
    import torch

    from replay_tui.checkpoints.formats import Buffer

DIGEST_VERSION = "replay-tui/tensor-digest/v1"


def tensor_digest(path: str | Path, *, data: Buffer | None = None) -> str:
    """sha256 (hex) of a checkpoint's content, independent of its container.

    Covers the sorted flattened names, each tensor's dtype, shape and raw little-endian
    bytes, and non-tensor leaves in a canonical form. The same state_dict saved as ``a.pt``,
    ``b.pt`` or ``.safetensors`` gives the same digest. Streams one tensor at a time.

    ``data``: the file's bytes (a memory map of the descriptor the caller opened and
    checked).  A safetensors file, or a ``torch.save`` zip of tensors in plain containers,
    is then digested from those bytes without torch (:func:`tensor_digest_torch_free`: the
    same value, no ``import torch``; the pickle is read by a restricted interpreter of
    torch's weights-only opcodes that builds plain containers and placeholders only);
    anything else, and every call without ``data``, goes through torch as it always did.
    """
    if data is not None:
        fast = tensor_digest_torch_free(path, data)
        if fast is not None:
            return fast
    import torch

    h = hashlib.sha256(DIGEST_VERSION.encode() + b"\n")
    with open_checkpoint(path) as ckpt:
        for name in ckpt.names():
            leaf = ckpt.leaf(name)
            if isinstance(leaf, torch.Tensor):
                t = dense(leaf)
                header = ["T", name, dtype_name(t), list(t.shape), t.numel() * t.element_size()]
                h.update(json.dumps(header).encode() + b"\n")
                h.update(_le_bytes(t))
            else:
                h.update(json.dumps(["V", name, canonical_value(leaf)]).encode() + b"\n")
    return h.hexdigest()


def tensor_digest_torch_free(path: str | Path, data: Buffer) -> str | None:
    """:func:`tensor_digest` of the checkpoint whose bytes are ``data``, where the
    torch-free readers know it (``path``'s suffix names the format); None where they
    decline it (torch would decide)."""
    if sys.byteorder != "little":
        return None  # the digest is of little-endian bytes: torch swaps them here
    view = memoryview(data)
    try:
        if view.ndim != 1 or view.itemsize != 1:
            return None
        try:
            leaves = leaves_without_torch(Path(path), view)
        except Exception:  # Declined, or a malformed file: either way torch decides
            return None
        h = hashlib.sha256(DIGEST_VERSION.encode() + b"\n")
        for name in sorted(leaves):
            leaf = leaves[name]
            if isinstance(leaf, TensorSpan):
                header = ["T", name, leaf.dtype, list(leaf.shape), leaf.stop - leaf.start]
                h.update(json.dumps(header).encode() + b"\n")
                h.update(view[leaf.start : leaf.stop])
            else:
                h.update(json.dumps(["V", name, canonical_value(leaf)]).encode() + b"\n")
        return h.hexdigest()
    finally:
        view.release()


def _le_bytes(t: torch.Tensor) -> memoryview:
    """The tensor's bytes in little-endian order, without a copy on little-endian hosts."""
    import torch

    raw = t.reshape(-1).view(torch.uint8).numpy()
    if sys.byteorder != "little" and t.element_size() > 1:
        word = t.element_size() // (2 if t.is_complex() else 1)
        raw = raw.reshape(-1, word)[:, ::-1].reshape(-1).copy()
    return raw.data
