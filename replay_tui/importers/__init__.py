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

**Bounds.**  Besides each file's own limit (``replay_tui.door.LIMITS``), one import as a
whole has a budget (:class:`ImportBudget`): the bytes of the files it reads or keeps (W&B
logs, tracker files, MLflow metric files, saved files and artifacts) total at most
``--max-bytes`` / ``REPLAY_TUI_IMPORT_MAX_BYTES`` (default 4 GiB), and its metric
histories at most ``--max-points`` / ``REPLAY_TUI_IMPORT_MAX_POINTS`` points (default one
million; one history holds at most ``storage.manifest.MAX_HISTORY_POINTS``, one run at
most :data:`MAX_METRIC_FILES` metrics).  Histories are read as streams that stop at the
limit, so what is held is bounded by the limits, not by the files.  A file that is
sparse (far fewer bytes on disk than its length, :func:`check_dense`) is refused rather
than copied densely.  Any of these stops the import before anything is stored (exit 2),
naming the limit and how to raise it.

**Trust roots.**  An import follows a link (W&B's saved files) or an artifact location
(MLflow's ``artifact_uri``) only into the tracker's own artifact folder (the W&B run
folder's own ``files/``; ``mlruns/`` or ``mlartifacts/``) or a folder the user named with
``--trust-root``; never into the folder that merely holds the run or the database.
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
from storage.manifest import MAX_HISTORY_POINTS, ManifestError, RunManifest, manifest_from_data
from storage.records import GapCounts
from storage.store import Location, RunStore
from storage.wire import Wire

IMPORTER_MODULES = {"mlflow": "replay_tui.importers.mlflow", "wandb": "replay_tui.importers.wandb"}
_RUN_ID_CHARS = re.compile(r"[^0-9A-Za-z_-]")
_HEX40 = re.compile(r"[0-9a-f]{40}")

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_MAX_BYTES = 4 * GiB
"""The bytes one import may read or keep, all its files together (``--max-bytes``)."""
DEFAULT_MAX_POINTS = 1_000_000
"""The metric points one import may hold, all its histories together (``--max-points``)."""
MAX_METRIC_FILES = 1000
"""The metrics one run may have (the manifest keeps at most this many histories)."""
MAX_POINTS = MAX_HISTORY_POINTS
"""The points one metric's history may have (the manifest's own limit)."""
BYTES_ENV = "REPLAY_TUI_IMPORT_MAX_BYTES"
POINTS_ENV = "REPLAY_TUI_IMPORT_MAX_POINTS"
SPARSE_MIN = 1 * MiB  # a smaller file is never called sparse (block rounding, inline data)
SPARSE_RATIO = 8  # sparse: fewer than 1/8 of its bytes are on disk


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
    over its limit, a sparse file): each is also listed without a hash in the manifest,
    a gap."""
    budget: ImportBudget | None = None  # the import's, shared by all its runs


class OverBudget(BadInput):
    """The import as a whole went past its budget: nothing of it is stored (exit 2)."""


def _size_text(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


_SIZE = re.compile(r"\s*([0-9]+)\s*([KMGT]?)(i?B)?\s*", re.IGNORECASE)


def parse_size(text: str, what: str) -> int:
    """``4GiB``, ``512M``, ``1000000`` (bytes) as a byte count; BadInput naming ``what``."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise BadInput(f"{what} {text!r}: not a size (bytes, or a number with K, M, G or T)")
    n = int(m.group(1)) << (10 * " KMGT".index((m.group(2) or " ").upper()))
    if n <= 0:
        raise BadInput(f"{what} {text!r}: must be more than 0")
    return n


@dataclass
class ImportBudget:
    """What one import may read or keep in total (see the module's "Bounds").

    ``take_bytes`` and ``take_points`` count what a reader is about to read or hold and
    raise :class:`OverBudget` (exit 2, naming the limit and how to raise it) before the
    limit is passed, so a refusal has read no more than the limit."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_points: int = DEFAULT_MAX_POINTS
    used_bytes: int = 0
    used_points: int = 0

    @classmethod
    def from_env(cls, max_bytes: int | None = None, max_points: int | None = None) -> ImportBudget:
        """The flags' values, else ``REPLAY_TUI_IMPORT_MAX_BYTES`` / ``_POINTS``, else the
        defaults."""
        import os

        if max_bytes is None:
            env = os.environ.get(BYTES_ENV)
            max_bytes = parse_size(env, BYTES_ENV) if env else DEFAULT_MAX_BYTES
        if max_points is None:
            env = os.environ.get(POINTS_ENV)
            if env and not env.strip().isdigit():
                raise BadInput(f"{POINTS_ENV} {env!r}: not a whole number of points")
            max_points = int(env) if env else DEFAULT_MAX_POINTS
        if max_bytes <= 0 or max_points <= 0:
            raise BadInput("an import's budget must be more than 0 bytes and 0 points")
        return cls(max_bytes, max_points)

    def take_bytes(self, n: int, what: str) -> None:
        if self.used_bytes + n > self.max_bytes:
            raise OverBudget(
                f"import budget: {what} ({_size_text(n)}) would bring this import's files to"
                f" {_size_text(self.used_bytes + n)}; the limit is {_size_text(self.max_bytes)}"
                " per import: nothing was stored",
                f"raise it with --max-bytes SIZE or {BYTES_ENV}=SIZE (e.g. 16GiB)",
            )
        self.used_bytes += n

    def take_points(self, n: int, what: str) -> None:
        if self.used_points + n > self.max_points:
            raise OverBudget(
                f"import budget: {what} would bring this import's metric histories to more"
                f" than {self.max_points} points; the limit is {self.max_points} points per"
                " import: nothing was stored",
                f"raise it with --max-points N or {POINTS_ENV}=N",
            )
        self.used_points += n


def budget_of(run: SourceRun) -> ImportBudget:
    if run.budget is None:
        run.budget = ImportBudget.from_env()
    return run.budget


def check_dense(fd: int, shown: str, kind: str) -> int:
    """The size of the open regular file ``fd``, refusing (``Refused``) a sparse one: at
    least :data:`SPARSE_MIN` long with fewer than 1/:data:`SPARSE_RATIO` of its bytes on
    disk (``st_blocks`` * 512).  Copied, such a file would take its whole length of disk
    (zeros the writer never wrote), so it is not taken by surprise."""
    import os

    from replay_tui.door import Refused

    st = os.fstat(fd)
    on_disk = int(st.st_blocks) * 512
    if st.st_size >= SPARSE_MIN and on_disk * SPARSE_RATIO < st.st_size:
        raise Refused(
            f"{kind} {shown} is sparse: {_size_text(int(st.st_size))} long but"
            f" {_size_text(on_disk)} on disk; a copy would take its whole length: refused",
            "if the file is really the run's, make it dense (cp --sparse=never) and import again",
        )
    return int(st.st_size)


def take_file(run: SourceRun, root: Path, inner: str, path: str) -> dict[str, Any]:
    """Hash the file ``root/inner`` (through the door: no link below ``root``, a regular
    file within ``LIMITS["saved file"]``, not sparse, its size taken from the import's
    budget) as the manifest's artifact ``path``, and note where to copy it from.

    ``Refused`` for this file only (the caller lists it refused, a gap); ``OverBudget``
    stops the import."""
    from replay_tui.capture.outputs import CHECKPOINT_SUFFIXES, tensor_digest_or_none
    from replay_tui.door import open_under

    with open_under(root, inner, "saved file") as f:
        size = check_dense(f.fd, f.shown, "saved file")
        budget_of(run).take_bytes(size, f"saved file {f.shown}")
        digest = hashlib.sha256()
        for chunk in f.chunks():
            digest.update(chunk)
        shown = Path(f.shown)
    sha = digest.hexdigest()
    kind = "checkpoint" if shown.suffix in CHECKPOINT_SUFFIXES else "file"
    entry: dict[str, Any] = {"path": path, "sha256": sha, "size_bytes": size, "kind": kind}
    if kind == "checkpoint":
        entry["tensor_sha256"] = tensor_digest_or_none(shown)
    run.files[sha] = (root, inner)
    return entry


def trust_roots(named: Iterable[str | Path], own: Iterable[Path]) -> list[Path]:
    """The folders an import may follow links and artifact locations into: the folders
    the user named (``--trust-root``, their own choice, links included; each must exist),
    then the tracker's own artifact folders ``own`` (taken only where each is a real
    folder, not a link: it lies in a folder from elsewhere).  Resolved."""
    import os
    import stat

    out: list[Path] = []
    for n in named:
        if not Path(n).is_dir():
            raise BadInput(f"--trust-root {n}: no such folder")
        out.append(Path(os.path.realpath(n)))
    for p in own:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out.append(Path(os.path.realpath(p)))
    return out


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
class Outcome(Wire):
    """What happened to one source run."""

    source_run_id: str
    run_id: str | None
    status: str  # imported / already / skipped
    reason: str | None = None
    name: str = ""
    gaps: dict[str, int] | None = None
    refused: tuple[str, ...] = ()


def _has_run(store: RunStore, run_id: str) -> bool:
    return readmodel.has_manifest(store, run_id)


def import_runs(
    store: RunStore,
    importer: Importer,
    source: str,
    *,
    budget: ImportBudget | None = None,
    **filters: Any,
) -> list[Outcome]:
    """Read every source run ``source`` and ``filters`` name, then store the new ones.

    Runs already in the store (same source identity) are reported as ``already`` and
    left as they are.  Any error while reading, the ``budget`` passed included, leaves
    the store unchanged.
    """
    from replay_tui.gaps import gap_counts
    from storage.objects import ObjectStore

    budget = budget if budget is not None else ImportBudget.from_env()
    outcomes: list[Outcome] = []
    ready: list[tuple[RunManifest, SourceRun]] = []
    seen: set[str] = set()
    for run in importer.discover(source, budget=budget, **filters):
        run.budget = budget
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
                        check_dense(f.fd, f.shown, "saved file")
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
