"""Python's cyclic garbage collector around the TUI's start.

The TUI's start builds a large heap that lives as long as the app (Textual, its widgets
and styles, the program's modules), and each full collection walks all of it: about
50 ms on the event loop, at random, in the middle of a keystroke or a scroll.  So the
program turns the collector off while it imports and builds the first screen
(:func:`pause_for_start`), and once the first page of runs is painted the app moves
what is alive then out of the collector's sight (:func:`settle`: ``gc.freeze``) and
turns it back on: later collections walk only what the session made since.  When the
app exits, :func:`release` gives the frozen objects back to the collector, so that a
process that runs the app many times (the tests) frees each app it is done with.

Reference counting frees everything acyclic all the while; only cyclic garbage made
during the start waits (for :func:`release`).
"""

from __future__ import annotations

import gc


class _State:
    paused = False
    """The collector was on, and :func:`pause_for_start` turned it off."""
    frozen = False


def pause_for_start() -> None:
    """The collector off until :func:`settle` (if it is on now)."""
    if gc.isenabled():
        gc.disable()
        _State.paused = True


def settle() -> None:
    """The start is over (the first page is painted): what is alive now is frozen, and
    the collector comes back on if :func:`pause_for_start` turned it off.  Once only."""
    if not _State.frozen:
        gc.freeze()
        _State.frozen = True
    if _State.paused:
        _State.paused = False
        gc.enable()


def release() -> None:
    """The app has exited: the frozen objects go back to the collector."""
    if _State.frozen:
        gc.unfreeze()
        _State.frozen = False
    if _State.paused:
        _State.paused = False
        gc.enable()
