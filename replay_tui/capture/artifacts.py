"""A run's output files hashed: the artifact globs matched without following a link,
each file opened through the door, charged to the output budget, and (in one pass) its
sha256, tensor digest and object-store copy taken from one read."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.capture import stale
from replay_tui.capture.hashing import sha256_regular_file
from replay_tui.capture.outputs import (
    BUDGET_REFUSALS_SAID,
    CHECKPOINT_SUFFIXES,
    EarlyOutputs,
    OutputBudget,
    read_once,
    tensor_digest_or_none,
)
from replay_tui.errors import BadInput

if TYPE_CHECKING:
    from storage.objects import ObjectStore


def artifact_entries(
    base: Path,
    patterns: Sequence[str],
    extra: Sequence[str],
    refused: list[str] | None = None,
    *,
    one_pass: bool = False,
    objects: ObjectStore | None = None,
    early: EarlyOutputs | None = None,
    budget: OutputBudget | None = None,
    before: stale.Before | None = None,
    unmatched: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Hash every file matching ``patterns`` (relative to ``base``) and SDK-logged paths.

    The output folder was written by the run (in a replay: by code from a manifest), so
    nothing in it is followed out of it: the globs are matched by the one matcher and
    walk (``door.glob_match``, ``door.glob_under``: ``**`` any number of folders, every
    file at every depth as the last part) from ``base`` down with no link followed; a
    symbolic link or a special file (device, FIFO, socket) anywhere on the way is
    refused, and each file is opened through the door, which refuses a sparse one.  A
    refused match is listed without a hash (so it shows as a gap and never compares
    equal) and its reason goes to ``refused``.  ``unmatched``: each glob that matched
    nothing goes there (the manifest's ``ARTIFACT_GLOB_EMPTY`` gap names it too).

    ``budget``: what the outputs may take in all (:class:`OutputBudget`, from the
    environment or the default where None): files are charged by size in path order,
    and one that does not fit is refused unread.  ``before`` (``stale.snapshot``): a
    file left there before the run is listed stale without being read or charged.

    ``one_pass``: a checkpoint's sha256 and tensor digest come from one memory map of
    one descriptor opened through the door (:func:`_checkpoint_pass`), torch-free where
    the format allows; the values are the same as without it.

    ``objects`` (with ``one_pass``): each file is kept in that object store in the same
    read that hashes it (:meth:`ObjectStore.put_fd`: the sha256 recorded is that of the
    very bytes kept), so keeping the run's artifacts after finds them there and reads
    nothing again.

    ``early`` (with ``one_pass``): what was read of each output as soon as the run closed
    it (:class:`outputs.EarlyOutputs`), taken where the file is still that very file.
    """
    from replay_tui.door import Refused, glob_parts, glob_under, open_under

    found: dict[str, Path] = {}
    problems: dict[str, str] = {}
    base = base.resolve()
    budget = OutputBudget.chosen() if budget is None else budget
    for pat in patterns:
        parts = glob_parts(pat)
        if parts is None:
            raise BadInput(f"--artifact {pat!r} must be a relative glob inside the workdir")
        hits = glob_under(base, parts)
        if not hits and unmatched is not None and pat not in unmatched:
            unmatched.append(pat)
        for hit in hits:
            if hit.what == "file":
                found[hit.rel] = base / hit.rel
            elif hit.what == "link":
                problems[hit.rel] = (
                    f"{hit.rel}: {hit.rel} is a symbolic link (-> {(hit.target or '?')[:200]});"
                    " links in a run's output are never followed"
                )
            else:
                problems[hit.rel] = (
                    f"{hit.rel}: not a regular file (a device, FIFO or socket): refused"
                )
    for e in extra:
        if not isinstance(e, str) or not e or "\x00" in e:
            continue
        p = Path(os.path.normpath(base / e))
        if not p.is_relative_to(base) or p == base:
            problems[e[:200]] = f"{e[:200]!r} is outside the output folder: not collected"
            continue
        rel = p.relative_to(base).as_posix()
        why = unsafe_member(base, rel)
        if why is None:
            found[rel] = p
        elif not why.endswith(_IS_FOLDER):
            problems[rel] = why
    out: list[dict[str, Any]] = []
    stale_said: list[str] = []
    over_budget: set[str] = set()
    for rel, p in sorted(found.items()):
        why_stale = stale.stale_reason(base, rel, before) if before is not None else None
        if why_stale is not None:  # not the run's: never read, never charged
            stale_said.append(f"{rel}: stale: {why_stale}, not written by the run")
            out.append(
                {
                    "path": rel,
                    "sha256": None,
                    "size_bytes": None,
                    "kind": "file",
                    "stale": why_stale,
                }
            )
            continue
        try:  # through the door: a sparse file (or one swapped for a link) is refused
            with open_under(base, rel, "run output") as opened:
                measured = opened.size
        except Refused as exc:
            problems[rel] = f"{rel}: {exc}"
            continue
        if (why := budget.charge(rel, measured)) is not None:
            problems[rel] = why
            over_budget.add(rel)
            continue
        kind = "checkpoint" if p.suffix in CHECKPOINT_SUFFIXES else "file"
        both = None
        try:
            if one_pass and (kind == "checkpoint" or objects is not None):
                both = _checkpoint_pass(
                    base,
                    rel,
                    p,
                    objects,
                    tensor=kind == "checkpoint",
                    early=early,
                    max_bytes=measured,
                )
            if both is None:
                digest, size = sha256_regular_file(p)
            else:
                digest, size = both[0], both[1]
            if size > measured:
                raise ValueError(f"it grew from {measured} bytes while it was collected")
        except (OSError, ValueError, RuntimeError) as exc:
            problems[rel] = f"{rel}: not hashed ({exc})"
            continue
        entry: dict[str, Any] = {"path": rel, "sha256": digest, "size_bytes": size, "kind": kind}
        if kind == "checkpoint":
            entry["tensor_sha256"] = tensor_digest_or_none(p) if both is None else both[2]
        out.append(entry)
    listed = said = 0
    for rel, why in sorted(problems.items()):
        if refused is not None and (rel not in over_budget or said < BUDGET_REFUSALS_SAID):
            said += rel in over_budget
            refused.append(why)
        if rel_path_ok(rel) and listed < MAX_REFUSED_LISTED:
            listed += 1  # in the manifest without a hash: an ARTIFACT_NO_HASH gap
            out.append({"path": rel, "sha256": None, "size_bytes": None, "kind": "file"})
    if refused is not None:
        if (more := budget.summary(said)) is not None:
            refused.append(more)
        refused.extend(stale_said)
    out.sort(key=lambda a: a["path"])
    return out


_IS_FOLDER = "is a folder"
MAX_REFUSED_LISTED = 100


def rel_path_ok(rel: str) -> bool:
    """Whether ``rel`` can stand in a manifest as an artifact path."""
    return (
        0 < len(rel) <= 1024
        and not rel.startswith("/")
        and os.path.normpath(rel) == rel
        and ".." not in rel.split("/")
        and not any(ord(c) < 0x20 or c == "\x7f" for c in rel)
    )


def unsafe_member(base: Path, rel: str) -> str | None:
    """Why ``base/rel`` may not be collected, or None when it is a regular file in ``base``.

    Every component is ``lstat``-ed: a link anywhere (even one pointing back inside) is
    refused, so what is hashed is what lies in the folder, never what a link names.
    """
    import stat as st_mod

    cur = base
    parts = rel.split("/")
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except OSError as e:
            return f"{rel}: cannot inspect it ({e.strerror})"
        shown = "/".join(parts[: i + 1])
        if st_mod.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(cur)
            except OSError:
                target = "?"
            return (
                f"{rel}: {shown} is a symbolic link (-> {target[:200]}); links in a run's"
                " output are never followed"
            )
        if i < len(parts) - 1:
            if not st_mod.S_ISDIR(st.st_mode):
                return f"{rel}: {shown} is not a folder"
        elif st_mod.S_ISDIR(st.st_mode):
            return f"{rel} {_IS_FOLDER}"
        elif not st_mod.S_ISREG(st.st_mode):
            return f"{rel}: not a regular file (a device, FIFO or socket): refused"
    return None


def _checkpoint_pass(
    base: Path,
    rel: str,
    shown: Path,
    objects: ObjectStore | None = None,
    *,
    tensor: bool = True,
    early: EarlyOutputs | None = None,
    max_bytes: int | None = None,
) -> tuple[str, int, str | None] | None:
    """A file's sha256, size and (``tensor``) tensor digest from one read of one
    descriptor opened through the door (``O_NOFOLLOW`` at every step from ``base``,
    regular files only): :func:`outputs.read_once`, or what ``early`` read of this very
    file while the run ran.  None where the door refuses it or the pass cannot serve:
    the caller then hashes it as before, and a refusal is then said in the words it
    always was.

    ``objects``: the sha256 comes from the copy into that object store, made in the same
    read (:meth:`ObjectStore.put_fd`); ``tensor`` False (a file that is no checkpoint):
    that copy alone, no map, and no tensor digest (None).  ``max_bytes``: the size the
    budget was charged; a file grown past it since is not copied.
    """
    from replay_tui.door import Refused, open_under

    try:
        with open_under(base, rel, "run output") as f:
            if max_bytes is not None and f.size > max_bytes:
                raise ValueError(f"{rel} grew from {max_bytes} bytes while it was collected")
            if early is not None and (got := early.take(rel, f.fd)) is not None:
                return got
            cap = f.size if max_bytes is None else max_bytes
            return read_once(f.fd, shown, lambda fd: _keep(objects, fd, shown, cap), tensor=tensor)
    except Refused:
        return None


def _keep(
    objects: ObjectStore | None, fd: int, shown: Path, max_bytes: int | None = None
) -> tuple[str, int] | None:
    """``fd``'s bytes kept in ``objects``, hashed as they are copied: their sha256 and
    size (no more than ``max_bytes`` copied).  None where there is no object store, or
    the copy failed (a full disk, a file grown since it was measured...): the file is
    then hashed alone, and keeping it after the manifest is built tries again and says
    why it fails."""
    if objects is None:
        return None
    try:
        kept = objects.put_fd(fd, None, name=str(shown), max_bytes=max_bytes)
        return objects.sha256_of(kept), kept.stat().st_size
    except (OSError, ValueError):
        return None
