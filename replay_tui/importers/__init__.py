"""Importers: runs that experiment trackers already hold, turned into manifests.

Each tracker is one module with an ``Importer``: ``discover`` lists the source runs a
user named (a tracking URI and filters, or run folders), ``to_manifest`` turns one into
a ``RunManifest``, and ``identity`` names the source run so importing it twice stores it
once.  The manifest holds only what the tracker recorded: everything else is ``None``
and shows as its provenance gap, never a guessed value.  ``source`` says where the run
came from (tracker, URI, the run's id there).

``import_runs`` reads every named run first and then stores them all in one transaction,
so an unreadable run (a corrupt log, an unreachable server) leaves the store unchanged.
Heavy tracker clients are imported inside the functions that use them; a missing one is
a clear error naming the extra to install (exit 2).
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from replay_tui.errors import BadInput
from storage import readmodel
from storage.manifest import ManifestError, RunManifest, manifest_from_data
from storage.records import GapCounts
from storage.store import Location, RunStore

IMPORTER_MODULES = {"mlflow": "replay_tui.importers.mlflow", "wandb": "replay_tui.importers.wandb"}
_RUN_ID_CHARS = re.compile(r"[^0-9A-Za-z_-]")
_HEX40 = re.compile(r"[0-9a-f]{40}")


@dataclass
class SourceRun:
    """One run in a tracker, as ``discover`` found it.

    ``handle`` is the tracker's own object (an MLflow ``Run``, a W&B run folder).
    ``to_manifest`` fills ``files`` (artifact sha256 -> where to read it: a root folder
    and a path under it, opened through ``replay_tui.door`` when it is copied) and
    ``blobs`` (sha256 -> (kind, bytes): a diff, a log) for the store.
    """

    tracker: str
    uri: str
    run_id: str
    handle: Any = None
    label: str = ""
    files: dict[str, tuple[Path, str]] = field(default_factory=dict)
    blobs: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    skip_reason: str | None = None  # set by discover: listed but not importable
    refused: list[str] = field(default_factory=list)
    """Files of the run not taken, and why (a link leading out, a special file, a file
    over its limit): each is also listed without a hash in the manifest, a gap."""


class Importer(Protocol):
    name: str

    def discover(self, source: str, **filters: Any) -> Iterable[SourceRun]: ...

    def to_manifest(self, run: SourceRun) -> RunManifest: ...

    def identity(self, run: SourceRun) -> str: ...


def load_importer(name: str) -> Importer:
    """The importer for tracker ``name``; exit 2 when its extra is not installed."""
    module_name = IMPORTER_MODULES.get(name)
    if module_name is None:
        raise BadInput(f"no importer for {name!r}; known: {', '.join(sorted(IMPORTER_MODULES))}")
    module = importlib.import_module(module_name)
    importer: Importer = module.IMPORTER
    return importer


def require(package: str, extra: str) -> Any:
    """Import a tracker client, or say which extra installs it (exit 2)."""
    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise BadInput(
            f"the {extra} importer needs the {package!r} package ({e})",
            f"pip install 'replay-tui[{extra}]'",
        ) from None


def imported_run_id(tracker: str, identity: str, readable: str = "") -> str:
    """A stable run id for a source run: the same source run always gets the same id."""
    digest = hashlib.sha256(f"{tracker}\0{identity}".encode()).hexdigest()
    tail = _RUN_ID_CHARS.sub("", readable)[:32]
    return f"{tracker}-{tail}-{digest[:12]}" if tail else f"{tracker}-{digest[:24]}"


def timestamp_ms(ms: int | float | None) -> str | None:
    """Milliseconds since the epoch as the manifest's RFC 3339 UTC form."""
    if ms is None:
        return None
    t = datetime.fromtimestamp(float(ms) / 1000.0, tz=UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def git_commit(value: Any) -> str | None:
    """A full lowercase git commit id, or None (a short or odd value is not a commit)."""
    if isinstance(value, str) and _HEX40.fullmatch(value.strip().lower()):
        return value.strip().lower()
    return None


def label_ok(value: Any, limit: int = 256) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and not any(ord(c) < 0x20 or c == "\x7f" for c in value)
    )


def build_manifest(data: dict[str, Any], where: str) -> RunManifest:
    """Validate an imported run's manifest; a refusal names the source run (exit 2)."""
    base: dict[str, Any] = {"schema_version": 1, "kind": "original", "workdir": "."}
    try:
        return manifest_from_data({**base, **data}, source=where).sealed()
    except ManifestError as e:
        raise BadInput(f"cannot import {where}: {e}") from None


@dataclass
class Outcome:
    """What happened to one source run."""

    source_run_id: str
    run_id: str | None
    status: str  # imported / already / skipped
    reason: str | None = None
    name: str = ""
    gaps: dict[str, int] | None = None
    refused: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_run_id": self.source_run_id,
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "name": self.name,
            "gaps": self.gaps,
            "refused": list(self.refused),
        }


def _has_run(store: RunStore, run_id: str) -> bool:
    return readmodel.has_manifest(store, run_id)


def import_runs(store: RunStore, importer: Importer, source: str, **filters: Any) -> list[Outcome]:
    """Read every source run ``source`` and ``filters`` name, then store the new ones.

    Runs already in the store (same source identity) are reported as ``already`` and
    left as they are.  Any error while reading leaves the store unchanged.
    """
    from replay_tui.compare.gaps import gap_counts
    from storage.objects import ObjectStore

    outcomes: list[Outcome] = []
    ready: list[tuple[RunManifest, SourceRun]] = []
    seen: set[str] = set()
    for run in importer.discover(source, **filters):
        run_id = imported_run_id(run.tracker, importer.identity(run), run.run_id)
        if run_id in seen:
            continue
        seen.add(run_id)
        if run.skip_reason is not None:
            outcomes.append(Outcome(run.run_id, None, "skipped", run.skip_reason, run.label))
            continue
        if _has_run(store, run_id):
            outcomes.append(Outcome(run.run_id, run_id, "already", "imported before", run.label))
            continue
        m = importer.to_manifest(run)
        ready.append((m, run))
    items: list[
        tuple[RunManifest, GapCounts | None, Sequence[Location], Mapping[str, tuple[str, bytes]]]
    ] = []
    for m, run in ready:
        counts = gap_counts(m)
        items.append((m, counts, [], run.blobs))
        outcomes.append(
            Outcome(
                run.run_id,
                m.run_id,
                "imported",
                None,
                m.name,
                {"critical": counts.critical, "warning": counts.warning, "info": counts.info},
                tuple(run.refused),
            )
        )
    if items:
        # artifacts go to the same object store as recorded runs' (put re-checks each
        # sha256 while copying); content-addressed, so a failed ingest leaves no record
        from replay_tui.door import open_under

        objects = ObjectStore.beside(store.path)
        for _m, run in ready:
            for sha, (root, rel) in run.files.items():
                try:
                    with open_under(root, rel, "saved file") as f:
                        objects.put_fd(f.fd, sha, name=f.shown)
                except (OSError, ValueError) as e:
                    raise BadInput(f"cannot keep artifact {rel} of {run.label}: {e}") from None
        store.ingest_many(items, origin=f"import:{importer.name}")  # foreign: never run unasked
    return outcomes


def iter_limited(items: Iterable[Any], limit: int | None) -> Iterator[Any]:
    for i, item in enumerate(items):
        if limit is not None and i >= limit:
            return
        yield item


def typed_params(params: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Tracker params (strings) as config values, typed only where unambiguous."""
    from replay_tui.capture.argv_config import MAX_VALUE, typed

    config: dict[str, Any] = {}
    raw: dict[str, str] = {}
    for k, v in sorted(params.items()):
        if not label_ok(k) or not isinstance(v, str):
            continue
        v = v[:MAX_VALUE]
        config[k] = typed(v)
        raw[k] = v
    return config, raw
