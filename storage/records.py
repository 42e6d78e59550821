"""Rows become typed records here, and only here; the records write themselves (and the
gap counts read themselves back) by ``storage.wire``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from storage.wire import Wire, wire

if TYPE_CHECKING:
    from storage.manifest import RunManifest

RUN_COLUMNS = (
    "id",
    "name",
    "kind",
    "replay_of",
    "status",
    "exit_code",
    "started_at",
    "ended_at",
    "duration_s",
    "commit",
    "branch",
    "dirty",
    "repo_url",
    "image_ref",
    "image_digest",
    "config_hash",
    "manifest_sha256",
    "command",
    "tags",
    "gaps_critical",
    "gaps_warning",
    "gaps_info",
    "last_verdict",
    "last_verdict_at",
    "signed",
    "ingested_at",
)
RUN_SELECT = ", ".join(f'"{c}"' for c in RUN_COLUMNS)


def _count(v: object, where: str) -> int:
    """A stored count; one that is not a whole number reads as 0, as it always has (a
    comparison body stored with an odd count still opens)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


@dataclass(frozen=True)
class GapCounts(Wire):
    """How many provenance gaps of each severity a run (or a pair of runs) has; a count
    that is absent or not a whole number reads as 0."""

    critical: int = field(default=0, metadata=wire(decode=_count))
    warning: int = field(default=0, metadata=wire(decode=_count))
    info: int = field(default=0, metadata=wire(decode=_count))


@dataclass(frozen=True)
class RunRecord(Wire):
    """One row of the runs browser (written with its gap counts as one object, last)."""

    WIRE_ORDER = tuple(
        c for c in RUN_COLUMNS if c not in {"gaps_critical", "gaps_warning", "gaps_info"}
    )

    id: str
    name: str
    kind: str
    replay_of: str | None
    status: str
    exit_code: int | None
    started_at: str
    ended_at: str | None
    duration_s: float | None
    commit: str | None
    branch: str | None
    dirty: bool | None
    repo_url: str | None
    image_ref: str | None
    image_digest: str | None
    config_hash: str | None
    manifest_sha256: str
    command: str
    tags: str
    gaps: GapCounts | None
    last_verdict: str | None
    last_verdict_at: str | None
    signed: bool
    ingested_at: str

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> RunRecord:
        d = dict(zip(RUN_COLUMNS, row, strict=True))
        gaps = None
        if d["gaps_critical"] is not None:
            gaps = GapCounts(d["gaps_critical"], d["gaps_warning"] or 0, d["gaps_info"] or 0)
        return cls(
            id=d["id"],
            name=d["name"],
            kind=d["kind"],
            replay_of=d["replay_of"],
            status=d["status"],
            exit_code=d["exit_code"],
            started_at=d["started_at"],
            ended_at=d["ended_at"],
            duration_s=d["duration_s"],
            commit=d["commit"],
            branch=d["branch"],
            dirty=None if d["dirty"] is None else bool(d["dirty"]),
            repo_url=d["repo_url"],
            image_ref=d["image_ref"],
            image_digest=d["image_digest"],
            config_hash=d["config_hash"],
            manifest_sha256=d["manifest_sha256"],
            command=d["command"],
            tags=d["tags"],
            gaps=gaps,
            last_verdict=d["last_verdict"],
            last_verdict_at=d["last_verdict_at"],
            signed=bool(d["signed"]),
            ingested_at=d["ingested_at"],
        )


REPLAY_COLUMNS = (
    "id",
    "created_at",
    "original_run",
    "replay_run",
    "backend",
    "status",
    "verdict",
    "reason",
    "duration_s",
    "comparison_id",
)
REPLAY_SELECT = ", ".join(f"r.{c}" for c in REPLAY_COLUMNS)
"""The replay fact's columns, for ``SELECT {REPLAY_SELECT}, <determinism> FROM replays r``."""


@dataclass(frozen=True)
class ReplayFact(Wire):
    """One replay attempt as the store recorded it (a row of ``replays``).

    ``status`` is the attempt's end (``replay_tui.verdicts``: completed, cancelled,
    interrupted, infra-error...); ``verdict`` is the comparison's, when one ran;
    ``determinism`` is what the replay ran with (``recorded``, ``off``...), from its body.
    """

    id: int
    created_at: str
    original_run: str
    replay_run: str | None
    backend: str | None
    status: str
    verdict: str | None
    reason: str | None
    duration_s: float | None
    comparison_id: int | None
    determinism: str | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> ReplayFact:
        """A row of ``REPLAY_SELECT`` followed by the determinism (or without it)."""
        d = dict(zip(REPLAY_COLUMNS, row[: len(REPLAY_COLUMNS)], strict=True))
        det = row[len(REPLAY_COLUMNS)] if len(row) > len(REPLAY_COLUMNS) else None
        return cls(**d, determinism=None if det is None else str(det))

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> ReplayFact:
        """A row read by column name (``REPLAY_COLUMNS``, ``determinism`` optional)."""
        return cls.from_row((*(d[c] for c in REPLAY_COLUMNS), d.get("determinism")))


def run_row(
    m: RunManifest, manifest_sha256: str, gaps: GapCounts | None, now: str
) -> dict[str, Any]:
    """The runs-table row derived from a manifest."""
    image = m.image
    return {
        "id": m.run_id,
        "name": m.name,
        "kind": m.kind,
        "replay_of": m.replay_of,
        "status": m.status,
        "exit_code": m.exit_code,
        "started_at": m.started_at,
        "ended_at": m.ended_at,
        "duration_s": m.duration_s,
        "commit": m.code.commit,
        "branch": m.code.branch,
        "dirty": None if m.code.dirty is None else int(m.code.dirty),
        "repo_url": m.code.repo_url,
        "image_ref": image.reference if image else None,
        "image_digest": image.digest if image else None,
        "config_hash": m.config_hash,
        "manifest_sha256": manifest_sha256,
        "command": " ".join(m.argv)[:4096],
        "tags": " ".join(f"{k}={v}" for k, v in sorted(m.tags.items())),
        "gaps_critical": None if gaps is None else gaps.critical,
        "gaps_warning": None if gaps is None else gaps.warning,
        "gaps_info": None if gaps is None else gaps.info,
        "last_verdict": None,
        "last_verdict_at": None,
        "signed": 0,
        "ingested_at": now,
    }


def history_json(points: list[tuple[int, float]]) -> str:
    """``json.dumps(points, separators=(",", ":"))``, by orjson where its text is the same:
    it writes doubles below 1e-4 as ``0.0000x`` or ``xe-y`` (``repr`` as ``1e-05``) and
    NaN as ``null``, so any ``e``, ``0.0000`` or ``null`` takes the ``json`` module."""
    try:
        out = orjson.dumps(points)
    except TypeError:  # an integer beyond 64 bits
        return json.dumps(points, separators=(",", ":"))
    if b"e" in out or b"0.0000" in out or b"null" in out:
        return json.dumps(points, separators=(",", ":"))
    return out.decode("ascii")
