"""The bundle's CycloneDX 1.6 ML-BOM (``bom.cdx.json``): what SBOM tools already read.

Raw JSON (``cyclonedx-python-lib`` cannot build a ``modelCard`` yet), valid against the
CycloneDX 1.6 JSON schema (the tests validate every one against the schema that library
ships).  It holds:

- the model: a ``machine-learning-model`` component named after the run, whose hash is
  the digest over its files (as ``model.sig``'s subject), with each model file (every
  hashed artifact) as a ``file`` component by sha256; its ``modelCard`` names the datasets
  it was trained on and carries, as ``quantitativeAnalysis.performanceMetrics``, the
  replay's verdict (``replay-verdict``), how many replays there were and the run's own
  final metrics;
- each data input as a ``data`` component by sha256 (a ``dataset``);
- each Python package the run's environment held as a ``library`` component with its
  version and purl (``pkg:pypi/<name>@<version>``);
- ``dependencies``: the model depends on its datasets and packages.

The BOM's ``serialNumber`` is a UUID derived from the run and the export time, so two
exports of one run differ and one export's BOM is its own.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote

from replay_tui.evidence.gather import Evidence
from replay_tui.evidence.modelsig import model_files, root_digest

BOM_NAME = "bom.cdx.json"
SPEC_VERSION = "1.6"
_NAMESPACE = uuid.UUID("5b0f1d3e-8a53-4f0e-9d57-0c1f6f3b7a11")  # replay-tui BOM serials
_PKG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


def purl(name: str, version: str) -> str:
    """The package URL of a PyPI package (name normalised as the purl spec says)."""
    norm = re.sub(r"[-_.]+", "-", name).lower()
    return f"pkg:pypi/{quote(norm, safe='')}@{quote(version, safe='')}"


def packages(lines: list[str]) -> list[tuple[str, str]]:
    """``(name, version)`` of each ``name==version`` line, once each, in name order."""
    seen: dict[str, tuple[str, str]] = {}
    for line in lines:
        m = _PKG.match(line.strip())
        if m:
            seen.setdefault(purl(m[1], m[2]), (m[1], m[2]))
    return sorted(seen.values(), key=lambda p: purl(*p))


def _metric_value(v: object) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def ml_bom(ev: Evidence, exported_at: str, tool_version: str) -> dict[str, Any]:
    m = ev.original
    files = model_files(m)
    model_ref = f"model:{m.run_id}"
    datasets = list(m.data)
    data_refs = [f"data:{m.run_id}:{d.name}" for d in datasets]
    pkgs = packages(list(m.environment.packages or []))
    latest = ev.latest
    metrics: list[dict[str, Any]] = [
        {
            "type": "replay-verdict",
            "value": ev.verdict or ev.verdict_text(),
            "slice": f"replay {latest.run_id}" if latest and latest.run_id else "no replay",
        },
        {"type": "replays", "value": str(len(ev.replays))},
    ]
    if ev.floor is not None:
        metrics.append(
            {"type": "noise-floor", "value": "measured", "slice": "see noise_floor.json"}
        )
    for name, value in sorted(m.outputs.metrics.items()):
        metrics.append({"type": f"metric:{name}", "value": _metric_value(value)})
    props = [
        {"name": "replay-tui:run_id", "value": m.run_id},
        {"name": "replay-tui:started_at", "value": m.started_at},
    ]
    if m.config_hash:
        props.append({"name": "replay-tui:config_hash", "value": m.config_hash})
    if m.code.commit:
        props.append({"name": "replay-tui:git_commit", "value": m.code.commit})
    model: dict[str, Any] = {
        "type": "machine-learning-model",
        "bom-ref": model_ref,
        "name": m.name or m.run_id,
        "version": m.run_id,
        "description": f"the model trained by run {m.run_id}",
        "modelCard": {
            "modelParameters": {
                "datasets": [{"ref": r} for r in data_refs],
            },
            "quantitativeAnalysis": {"performanceMetrics": metrics},
        },
        "properties": [
            {"name": "replay-tui:run_id", "value": m.run_id},
            {"name": "replay-tui:started_at", "value": m.started_at},
            *(
                [{"name": "replay-tui:config_hash", "value": m.config_hash}]
                if m.config_hash
                else []
            ),
            *([{"name": "replay-tui:git_commit", "value": m.code.commit}] if m.code.commit else []),
        ],
    }
    if files:
        model["hashes"] = [{"alg": "SHA-256", "content": root_digest(files)}]
        model["components"] = [
            {
                "type": "file",
                "bom-ref": f"file:{m.run_id}:{name}",
                "name": name,
                "hashes": [{"alg": "SHA-256", "content": sha}],
            }
            for name, sha in files
        ]
    components: list[dict[str, Any]] = [model]
    for ref, d in zip(data_refs, datasets, strict=True):
        comp: dict[str, Any] = {
            "type": "data",
            "bom-ref": ref,
            "name": d.name,
            "data": [{"type": "dataset", "name": d.name, "description": f"read from {d.path}"}],
            "properties": [{"name": "replay-tui:path", "value": d.path}],
        }
        if d.version:
            comp["version"] = d.version
        if d.sha256:
            comp["hashes"] = [{"alg": "SHA-256", "content": d.sha256}]
        components.append(comp)
    for name, version in pkgs:
        components.append(
            {
                "type": "library",
                "bom-ref": purl(name, version),
                "name": name,
                "version": version,
                "purl": purl(name, version),
            }
        )
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(_NAMESPACE, f'{m.run_id}@{exported_at}')}",
        "version": 1,
        "metadata": {
            "timestamp": exported_at,
            "tools": {
                "components": [
                    {"type": "application", "name": "replay-tui", "version": tool_version}
                ]
            },
            "component": {
                "type": "machine-learning-model",
                "bom-ref": f"{model_ref}:subject",
                "name": m.name or m.run_id,
                "version": m.run_id,
            },
        },
        "components": components,
        "dependencies": [
            {"ref": model_ref, "dependsOn": [*data_refs, *(purl(n, v) for n, v in pkgs)]}
        ],
    }
