"""What the launcher learns before the run: the code (git), the data inputs hashed,
the working folder, the training environment, and (when no side thread does it) the
run's Python and the GPUs."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from replay_tui.capture import probes
from replay_tui.capture.hashing import StatCache, hash_path
from replay_tui.errors import BadInput
from replay_tui.sdk import DETERMINISM_ENV, SEED_ENV

if TYPE_CHECKING:
    from replay_tui.capture.options import RecordOptions
    from replay_tui.capture.side_threads import SideWork
    from storage.store import Location


def parse_data_arg(arg: str, cwd: Path) -> tuple[str, Path]:
    """``PATH`` or ``NAME=PATH`` to (name, absolute path)."""
    name, _, path = arg.partition("=") if "=" in arg else ("", "", arg)
    p = (cwd / path).resolve()
    if not p.exists():
        raise BadInput(f"--data {arg!r}: {p} does not exist")
    return (name or p.name), p


Place = tuple[Literal["repo", "data", "workdir", "output"], str, str]
"""A ``storage.store.Location`` as plain values (role, name, host path): what ``record``
learns before the launch, made into locations after it (the store is imported then)."""


def as_locations(places: Iterable[Place]) -> list[Location]:
    from storage.store import Location

    return [Location(*p) for p in places]


def data_entries(
    items: Sequence[tuple[str, Path]], repo_root: Path | None, cache: StatCache | None
) -> tuple[list[dict[str, Any]], list[Location]]:
    """Hash each data input; its manifest path is relative to the repo when inside it."""
    entries, places = _data_entries(items, repo_root, cache)
    return entries, as_locations(places)


def _data_entries(
    items: Sequence[tuple[str, Path]], repo_root: Path | None, cache: StatCache | None
) -> tuple[list[dict[str, Any]], list[Place]]:
    entries: list[dict[str, Any]] = []
    locs: list[Place] = []
    names: set[str] = set()
    for name, p in items:
        if name in names:
            raise BadInput(f"--data name {name!r} given twice")
        names.add(name)
        try:
            digest = hash_path(p, cache=cache)
        except (ValueError, OSError, RuntimeError) as e:
            raise BadInput(f"--data {p}: cannot hash it: {e}") from None
        rel = p.name
        if repo_root is not None and p.is_relative_to(repo_root):
            rel = p.relative_to(repo_root).as_posix() or p.name
        entries.append(
            {
                "name": name,
                "path": rel,
                "sha256": digest.sha256,
                "size_bytes": digest.size_bytes,
                "file_count": digest.file_count,
            }
        )
        locs.append(("data", name, str(p)))
    return entries, locs


@dataclass
class Outside:
    """What the launcher learnt before the run."""

    git: probes.GitState
    python: probes.PythonEnv
    gpus: probes.GpuProbe
    data: list[dict[str, Any]]
    locations: list[Location]
    env: dict[str, str]


def probe_outside(
    opts: RecordOptions,
    cache: StatCache | None,
    interpreter: str,
    side: SideWork | None = None,
    places: list[Place] | None = None,
) -> Outside:
    """What the launcher learns before the run.  With ``side`` (started), the Python
    packages and the GPUs are left to it: :meth:`SideWork.fill` puts them in after the
    run.  The code (git) and the data are always read here, before the command starts:
    the command may change either as soon as it runs.  With ``places`` (a list), the
    locations go there as plain values and ``locations`` is left empty, for the caller
    to fill after the launch (:data:`Place`)."""
    git_state = probes.probe_git(opts.cwd)
    data_items = [parse_data_arg(d, opts.cwd) for d in opts.data]
    data, found = _data_entries(data_items, git_state.root, cache)
    if git_state.root is not None:
        found.append(("repo", "root", str(git_state.root)))
    found.append(("workdir", "cwd", str(opts.cwd.resolve())))
    if places is not None:
        places.extend(found)
    locs = as_locations(found) if places is None else []
    env = probes.training_env(os.environ, opts.env_names)
    if opts.seed is not None:
        env.setdefault("PYTHONHASHSEED", str(opts.seed))
        env[SEED_ENV] = str(opts.seed)
    if opts.deterministic is not None:
        env[DETERMINISM_ENV] = "on" if opts.deterministic else "off"
    if side is not None:
        python, gpus = probes.PythonEnv(), probes.GpuProbe()
    else:
        python = probes.probe_python(interpreter) if not opts.image else probes.PythonEnv()
        gpus = probes.probe_gpus()
    return Outside(git=git_state, python=python, gpus=gpus, data=data, locations=locs, env=env)
