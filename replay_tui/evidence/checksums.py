"""The bundle's checksum list: ``SHA256SUMS``, in the format ``sha256sum -c`` reads.

One line per file, ``<64 hex>  <relative/path>``, sorted by path, ``/`` separators.  The
list covers every file of the bundle except itself and the signed envelope (which names
the list's own digest, so together they cover every byte).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from replay_tui.capture.hashing import sha256_file

SUMS_NAME = "SHA256SUMS"
_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


class ChecksumFormatError(ValueError):
    """SHA256SUMS does not parse; the message names the line."""


def safe_name(name: str) -> bool:
    """A bundle file name: relative, normalised, no '..', nothing ``sha256sum`` escapes."""
    return (
        bool(name)
        and not name.startswith("/")
        and posixpath.normpath(name) == name
        and ".." not in name.split("/")
        and not any(c in name for c in "\\\n\r\x00")
        and all(ord(c) >= 0x20 for c in name)
    )


def bundle_files(root: Path) -> tuple[list[str], list[str]]:
    """Every regular file under ``root`` as a relative POSIX name, and anything else found.

    The second list names what a bundle never holds (symlinks, devices, sockets,
    unreadable names, empty folders as ``name/``): verify reports those as added.
    """
    files: list[str] = []
    odd: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        if not dirnames and not filenames and base != root:
            odd.append(base.relative_to(root).as_posix() + "/")  # an empty folder
        for d in list(dirnames):
            if (base / d).is_symlink():
                odd.append((base / d).relative_to(root).as_posix())
                dirnames.remove(d)
        for f in filenames:
            p = base / f
            name = p.relative_to(root).as_posix()
            if p.is_symlink() or not p.is_file():
                odd.append(name)
            else:
                files.append(name)
    return sorted(files), sorted(odd)


def hash_files(root: Path, names: Iterable[str]) -> dict[str, str]:
    return {n: sha256_file(root / n) for n in names}


def render(digests: Mapping[str, str]) -> bytes:
    lines = []
    for name in sorted(digests):
        if not safe_name(name):
            raise ValueError(f"bundle file name {name!r} cannot be listed in {SUMS_NAME}")
        lines.append(f"{digests[name]}  {name}\n")
    return "".join(lines).encode("utf-8")


def parse(data: bytes) -> dict[str, str]:
    """``{name: sha256}`` from SHA256SUMS bytes; strict (a bundle's list is machine-made)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChecksumFormatError(f"not UTF-8 (byte {e.start})") from None
    if text and not text.endswith("\n"):
        raise ChecksumFormatError("the last line has no newline")
    out: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        m = _LINE.fullmatch(line)
        if m is None:
            raise ChecksumFormatError(f"line {i} is not '<sha256>  <file>'")
        digest, name = m.group(1), m.group(2)
        if not safe_name(name):
            raise ChecksumFormatError(f"line {i} names an unsafe path {name!r}")
        if name in out:
            raise ChecksumFormatError(f"line {i} lists {name} a second time")
        out[name] = digest
    return out
