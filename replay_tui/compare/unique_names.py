"""Artifacts whose names a framework makes unique per run, paired by what they are.

TensorBoard names each event file after the time, host and process that wrote it
(``events.out.tfevents.<time>.<host>.<pid>.<n>``); Lightning numbers each run's folder
(``lightning_logs/version_N/``) and the Hugging Face Trainer each checkpoint's
(``checkpoint-N/``).  Two runs of one program then list the same outputs under other
paths.  :func:`pair` maps the paths one run alone lists onto the other's where they are
the same thing: the same path once those parts are taken as a pattern, paired in order
(by the numbers in them) when each side has as many.  An event file's bytes hold wall
times, so a pair of them is never judged by its bytes (:data:`EVENT_FILE_NOTE`): its
scalars are the run's metrics, compared step by step."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from replay_tui.compare.artifacts import ArtifactDiff

    _D = TypeVar("_D", bound=ArtifactDiff)
else:
    _D = TypeVar("_D")

_PARTS = (
    (re.compile(r"^events\.out\.tfevents\..+$"), "events.out.tfevents.*"),
    (re.compile(r"^version_\d+$"), "version_*"),
    (re.compile(r"^checkpoint-\d+$"), "checkpoint-*"),
)

EVENT_FILE_NOTE = (
    "a TensorBoard event file: its bytes hold wall times; its scalars are compared as metrics"
)


def pattern(path: str) -> str | None:
    """``path`` with its run-unique parts as patterns, or None when it has none."""
    parts = path.split("/")
    changed = False
    for i, part in enumerate(parts):
        for rx, shown in _PARTS:
            if rx.match(part):
                parts[i] = shown
                changed = True
                break
    return "/".join(parts) if changed else None


def is_event_file(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith("events.out.tfevents.")


def _order(path: str) -> tuple[tuple[int, ...], str]:
    return tuple(int(n) for n in re.findall(r"\d+", path)), path


def pair(only_a: Iterable[str], only_b: Iterable[str]) -> dict[str, str]:
    """B's path -> A's path, for the paths only one side lists that are the same thing."""
    groups_a: dict[str, list[str]] = {}
    groups_b: dict[str, list[str]] = {}
    for paths, groups in ((only_a, groups_a), (only_b, groups_b)):
        for p in paths:
            key = pattern(p)
            if key is not None:
                groups.setdefault(key, []).append(p)
    out: dict[str, str] = {}
    for key, pa in groups_a.items():
        pb = groups_b.get(key, [])
        if pb and len(pa) == len(pb):
            for a, b in zip(sorted(pa, key=_order), sorted(pb, key=_order), strict=True):
                out[b] = a
    return out


def marked(diff: _D, paired: dict[str, str]) -> _D:
    """``diff`` (an ``artifacts.ArtifactDiff``) saying which of B's paths it was paired
    with, and an event file whose bytes differ marked as not judged by them."""
    from dataclasses import replace

    b_path = next((b for b, a in paired.items() if a == diff.path), None)
    if b_path is not None:
        said = f"paired with B's {b_path} (a name the framework makes unique per run)"
        diff = replace(diff, note=f"{said}; {diff.note}" if diff.note else said)
    if diff.status == "differs" and diff.volatile is None and is_event_file(diff.path):
        extra = EVENT_FILE_NOTE if not diff.note else f"{diff.note}; {EVENT_FILE_NOTE}"
        diff = replace(diff, volatile=pattern(diff.path), note=extra)
    return diff
