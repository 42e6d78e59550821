"""How a checkpoint's nested object becomes leaves: dotted names (list indices become
numbers), the name of a lone top-level value, and the canonical text of a leaf that is
no tensor (what the digest covers, and what the comparison calls equal)."""

from __future__ import annotations

from collections.abc import Mapping

ROOT_NAME = "(root)"
"""Name given to a checkpoint whose top level is a single tensor or value."""


def key_name(key: object) -> str:
    """A mapping key as it appears in a leaf's dotted name."""
    return key if isinstance(key, str) else str(key) if isinstance(key, int) else repr(key)


def join_name(prefix: str, key: str) -> str:
    """``prefix.key``, or ``key`` at the top level."""
    return f"{prefix}.{key}" if prefix else key


def canonical_value(v: object) -> str:
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
