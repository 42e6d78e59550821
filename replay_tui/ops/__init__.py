"""The use cases: one function per thing a user does, under both faces.

``cli/`` and ``tui/`` are two faces over the same actions (compare two runs, replay a
run, ...).  Each action is one function here that takes plain inputs (an open
``RunStore``, run references, a ``Tolerance``, ``on_event`` and ``should_cancel``
callbacks) and returns a frozen, typed outcome built by keyword: what was done, its
verdict (a ``Literal``), the ids of what it stored and the exit code the command ends
with.  An outcome carries no text: each face says it in its own words (the CLI's
``render``, the TUI's screens).

The rules that are the same for both faces live here, once:

- A/B order: the caller's order, or the earlier run as the reference
  (:func:`replay_tui.ops.compare.reference_first`);
- where a comparison is stored, and whose badge takes its verdict (B's, only when B is
  a replay of A: :func:`replay_tui.ops.compare.badge_run`);
- which noise floor judges a pair (``replay.runner.compare_pair``, called from here);
- an aborted replay (cancelled, interrupted, timed out, infra-error) is NOT JUDGED, with
  exit 130 (stopped) or 3 (could not run) (:mod:`replay_tui.ops.judgement`).

This package sits between the faces and the domain (``pyproject.toml``'s layers); it
imports no face, no Textual and no click.  Heavy domain modules are imported inside the
functions that need them, so a face that imports an outcome type pays for nothing.
"""

from __future__ import annotations
