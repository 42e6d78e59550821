"""Comparing two manifests of the same run field by field."""

from __future__ import annotations

from typing import Any

PER_RUN = {
    "run_id": "a new id for every run",
    "started_at": "wall clock",
    "ended_at": "wall clock",
    "duration_s": "wall clock",
    "outputs.metric_times": "seconds since the start at which each metric was printed",
    "integrity": "the manifest's own hash, over everything above",
}
"""The manifest fields that differ between two recordings of the same run whatever the
launcher does; every other field must be equal, the hashes and digests included."""


def fields_of(data: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf field of a manifest as ``a.b.c`` -> value (lists kept whole)."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(fields_of(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def comparable(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in fields.items() if not any(k == p or k.startswith(p + ".") for p in PER_RUN)
    }
