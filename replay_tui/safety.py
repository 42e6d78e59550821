"""Small guards for untrusted input: printing manifest strings, memory sizes.

Manifests, imported runs and bundles come from elsewhere.  A string in them may carry
terminal escape sequences (an OSC or CSI sequence can retitle the window, move the
cursor, or overwrite what was printed so a hostile command looks harmless).  Everything
that prints a manifest string goes through :func:`escape_control`.  Files that are not
ours (a path given on the command line may name ``/dev/zero``, a FIFO or a huge file) are
read through :mod:`replay_tui.door`, the one door for untrusted bytes.
"""

from __future__ import annotations

import re

# Bidirectional overrides and isolates reorder what a terminal shows (CVE-2021-42574).
_BIDI = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


def _escape_char(ch: str) -> str:
    o = ord(ch)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}"


def is_unsafe_char(ch: str, *, keep_newlines: bool = False) -> bool:
    """A C0/C1 control character, DEL, or a bidi control (newline/tab kept on request)."""
    o = ord(ch)
    if keep_newlines and ch in "\n\t":
        return False
    return o < 0x20 or 0x7F <= o <= 0x9F or ch in _BIDI


def escape_control(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as a visible ``\\xNN`` escape.

    ESC (``\\x1b``), CR, backspace, DEL, the C1 range (``\\x9b`` is a one-byte CSI) and
    the bidi overrides become escapes, so a terminal prints exactly what is there.
    A backslash stays a backslash.  ``keep_newlines`` leaves ``\\n`` and ``\\t`` (for log
    tails printed as blocks); everything else is escaped in every mode.
    """
    if text.isprintable() and not any(ch in _BIDI for ch in text):
        return text  # the common case: nothing to do
    return "".join(
        _escape_char(ch) if is_unsafe_char(ch, keep_newlines=keep_newlines) else ch for ch in text
    )


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`escape_control` would escape."""
    return any(is_unsafe_char(ch) for ch in text)


_MEMORY = re.compile(r"([0-9]{1,15})([bkmg]?)", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MIN_MEMORY = 6 << 20  # the engine refuses less than 6 MiB


def memory_limit_arg(value: str | None) -> str | None:
    """A ``--memory`` value the engine takes (``512m``, ``2g``), or click.BadParameter."""
    if value is None:
        return None
    import click

    m = _MEMORY.fullmatch(value.strip())
    if m is None:
        raise click.BadParameter(
            f"{escape_control(value)!r} is not a memory size: a whole number with b, k, m or"
            " g (e.g. 512m, 2g)"
        )
    size = int(m.group(1)) * _UNIT[m.group(2).lower()]
    if size < MIN_MEMORY:
        raise click.BadParameter(f"{value} is below the 6m the engine accepts")
    return f"{m.group(1)}{m.group(2).lower()}"
