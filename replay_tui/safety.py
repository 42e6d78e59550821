"""Small guards for untrusted input: printing manifest strings, memory sizes.

Manifests, imported runs, bundles, the store's facts, a run's log and a container's
output come from elsewhere.  A string in them may carry terminal escape sequences: an
OSC 52 sequence writes the terminal's clipboard (tmux passes it on with
``set-clipboard on``), OSC 8 makes a link, a CSI sequence moves the cursor, clears the
screen or overwrites what was printed so that a hostile command looks harmless, a C1
character (``\x9b``) is a one-byte CSI, a bidi override reorders what is shown.
:func:`escape_control` is the one function that makes such a string safe for a
terminal, and every face uses it: the CLI's text, errors and ``--csv``, the TUI's
widgets (``replay_tui.tui.widgets.style.safe`` turns it into a Rich ``Text``, never
markup), the evidence reports.  Files that are not ours (a path given on the command
line may name ``/dev/zero``, a FIFO or a huge file) are read through
:mod:`replay_tui.door`, the one door for untrusted bytes.
"""

from __future__ import annotations

import re

# Bidirectional overrides and isolates reorder what a terminal shows (CVE-2021-42574);
# the line and paragraph separators break a line where none is seen.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
# C0 (ESC, CR, BS, BEL...), DEL, C1 (``\x9b`` CSI, ``\x9d`` OSC...), the bidi controls, and
# lone surrogates (no terminal encoding can write them: a print would fail).
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_UNSAFE_KEEPING_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")


def _escape_char(ch: str) -> str:
    o = ord(ch)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}"


def _escaped(m: re.Match[str]) -> str:
    return _escape_char(m.group())


def is_unsafe_char(ch: str, *, keep_newlines: bool = False) -> bool:
    """A C0/C1 control character, DEL, a bidi control or a lone surrogate (newline and
    tab kept on request)."""
    return (_UNSAFE_KEEPING_LINES if keep_newlines else _UNSAFE).match(ch) is not None


def escape_control(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as a visible ``\\xNN`` escape.

    ESC (``\\x1b``), CR, backspace, DEL, the C1 range (``\\x9b`` is a one-byte CSI), the
    bidi overrides and lone surrogates become escapes, so a terminal prints exactly what
    is there and interprets none of it.  A backslash stays a backslash (so the result is
    its own escape: escaping twice changes nothing).  ``keep_newlines`` leaves ``\\n`` and
    ``\\t`` (for log tails printed as blocks); everything else is escaped in every mode.
    """
    pattern = _UNSAFE_KEEPING_LINES if keep_newlines else _UNSAFE
    if pattern.search(text) is None:
        return text  # the common case: nothing to do (one scan in C)
    return pattern.sub(_escaped, text)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`escape_control` would escape."""
    return _UNSAFE.search(text) is not None


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
