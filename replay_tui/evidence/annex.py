"""The EU AI Act Annex IV map: for each item Annex IV §2 asks the technical documentation
for, the bundle's facts that answer it, and, said plainly, what the bundle cannot answer.

The map is a bundle member (``annex_iv.json``, :func:`annex_map`) and a section of the
report (:func:`markdown_section`, :func:`html_section`).  A fact names the bundle member
that holds it and the field in it, with its value where it is short.  The bundle records
what the run did; it cannot say why (design rationale, assumptions), how data were
labelled or cleaned before the run saw them, who is responsible for a test, or that the
bundle is kept: those items say so instead of pretending.
"""

from __future__ import annotations

import html
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from replay_tui.evidence.gather import Evidence
from replay_tui.evidence.report import Section
from storage.wire import Wire, wire

ANNEX_NAME = "annex_iv.json"
SCHEMA = "https://replay-tui.dev/annex-iv/v1"

ANSWERED, PARTLY, NOT_ANSWERED = "answered", "partly answered", "not answered"


@dataclass(frozen=True)
class Fact(Wire):
    member: str
    field: str
    value: str | None = None

    def text(self) -> str:
        v = f" = {self.value}" if self.value is not None else ""
        return f"{self.member}: {self.field}{v}"


@dataclass(frozen=True)
class Item(Wire):
    """One item Annex IV asks for: the facts that answer it and what the bundle cannot
    answer (written with its status after what it asks)."""

    WIRE_EXTRA = ("status",)
    WIRE_ORDER = ("id", "ref", "asks", "status")

    id: str
    ref: str
    asks: str
    facts: list[Fact] = field(default_factory=list, metadata=wire(key="answered_by"))
    cannot: list[str] = field(default_factory=list, metadata=wire(key="cannot_answer"))

    @property
    def status(self) -> str:
        if not self.facts:
            return NOT_ANSWERED
        return PARTLY if self.cannot else ANSWERED


def _short(v: object, limit: int = 80) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def default_members(ev: Evidence) -> set[str]:
    """The members every export of ``ev`` writes whatever its key (``model.sig`` and
    ``signer.pub`` depend on the key, ``bisects.json`` on the store: not listed)."""
    out = {
        "manifest.json",
        "comparison.json",
        "gaps.json",
        "report.md",
        "report.html",
        "bom.cdx.json",
        "provenance.intoto.jsonl",
        "provenance.slsa.intoto.jsonl",
        "SHA256SUMS",
        ANNEX_NAME,
    }
    if ev.floor is not None:
        out.add("noise_floor.json")
    if any(r.manifest is not None for r in ev.replays):
        out.add("replays/")
    out.add("logs/")
    return out


def items(ev: Evidence, members: Collection[str] | None = None) -> list[Item]:
    m = ev.original
    have = set(members) if members is not None else default_members(ev)
    hw, env, code = m.hardware, m.environment, m.code
    dev = [
        Fact("manifest.json", "code.repo_url"),  # a URL the standalone page does not show
        Fact("manifest.json", "code.commit", code.commit),
        Fact("manifest.json", "code.dirty / code.diff_sha256", _short(code.diff_sha256)),
        Fact("manifest.json", "argv (the training command)", _short(" ".join(m.argv))),
        Fact("bom.cdx.json", "components[type=library] (packages as purls)",
             str(len(env.packages or []))),
        Fact("provenance.slsa.intoto.jsonl", "resolvedDependencies (source, image, data)"),
    ]  # fmt: skip
    if m.image is not None and m.image.digest:
        dev.append(Fact("manifest.json", "image.digest", m.image.digest))
    design = [
        Fact("manifest.json", "config (the hyperparameters as run)", m.config_hash),
        Fact("manifest.json", "determinism", _short(m.determinism.model_dump(mode="json"))),
        Fact("manifest.json", "randomness (seeds)", _short(m.randomness.seed)),
    ]
    gpus = ", ".join(g.name for g in hw.gpus or []) or None
    compute = [
        Fact("manifest.json", "hardware.gpus", _short(gpus)),
        Fact("manifest.json", "hardware.cpu_model / cpu_count", _short(hw.cpu_model)),
        Fact("manifest.json", "started_at / ended_at / duration_s", _short(m.duration_s)),
        Fact("manifest.json", "environment (torch, CUDA, cuDNN, NCCL, OS, host)",
             _short(env.torch_version)),
    ]  # fmt: skip
    if "replays/" in have:
        compute.append(Fact("replays/<run>.json", "replay (backend, sandbox, Slurm job)"))
    data = [
        Fact("manifest.json", f"data[{d.name}].sha256 / size_bytes / file_count / version",
             d.sha256)
        for d in m.data
    ]  # fmt: skip
    if m.data:
        data.append(Fact("bom.cdx.json", "components[type=data] (datasets by hash)"))
    validation = [
        Fact("comparison.json", "verdict of the replay", ev.verdict or ev.verdict_text()),
        Fact("gaps.json", "provenance gaps of the run and of each replay"),
        Fact("provenance.intoto.jsonl", "DSSE signature over the statement and SHA256SUMS"),
        Fact(
            "manifest.json", "outputs.metrics / metric_history", _short(sorted(m.outputs.metrics))
        ),
    ]
    for name, what in (
        ("replays/", "replays/<run>.json: each replay's manifest"),
        ("logs/", "logs/<run>.log: the captured output of the run and of each replay"),
        ("noise_floor.json", "the noise floor a WITHIN_NOISE verdict was judged by"),
        ("bisects.json", "bisects that searched a difference of this run"),
        ("model.sig", "OpenSSF signature over the model files"),
    ):
        if name in have:
            validation.append(Fact(name.rstrip("/"), what))
    keep = [
        Fact("SHA256SUMS", "sha256 of every member: checkable offline (sha256sum -c)"),
        Fact("provenance.intoto.jsonl", "predicate.exported_at and store.ledger_head"),
    ]
    return [
        Item(
            "development-methods",
            "Annex IV §2(a)",
            "the methods and steps of development, including third-party tools and components",
            dev,
            ["why these methods, tools and pre-trained components were chosen"],
        ),
        Item(
            "design-choices",
            "Annex IV §2(b)",
            "the design specifications and key design choices, with rationale and assumptions",
            design,
            [
                "design rationale: why these choices were made",
                "assumptions about the persons or groups the system is meant for",
            ],
        ),
        Item(
            "compute",
            "Annex IV §2(g)",
            "the computational resources used to develop, train, test and validate",
            compute,
            ["energy use; compute of work done outside recorded runs (tuning, ablations)"],
        ),
        Item(
            "data",
            "Annex IV §2(d)",
            "data provenance, scope and characteristics, how data were obtained, selected,"
            " labelled and cleaned",
            data,
            [
                "labelling procedures",
                "data cleaning and selection methodologies, and where the data came from"
                " before the run's folder",
            ],
        ),
        Item(
            "validation-testing",
            "Annex IV §2(g)",
            "validation and testing procedures, metrics, and test logs dated and signed",
            validation,
            [
                "who is responsible: the signature names a key, not a person",
                "tests of accuracy, robustness or bias on held-out data beyond what the run logged",
            ],
        ),
        Item(
            "retention",
            "Article 18",
            "documentation kept for 10 years after the system is placed on the market",
            keep,
            ["that the bundle is kept: retention is the operator's, not the bundle's"],
        ),
    ]


def annex_map(ev: Evidence, members: Collection[str] | None = None) -> dict[str, Any]:
    """The ``annex_iv.json`` member (``members``: the bundle's files and folders)."""
    return {
        "schema": SCHEMA,
        "run_id": ev.original.run_id,
        "regulation": "EU AI Act (Regulation (EU) 2024/1689), Annex IV §2 and Article 18",
        "items": [i.to_dict() for i in items(ev, members)],
    }


TITLE = "EU AI Act Annex IV map"
INTRO = (
    "For each item Annex IV §2 asks the technical documentation for: the facts in this"
    " bundle that answer it, and what the bundle cannot answer."
)


def _md(text: str) -> str:
    """Text safe in a Markdown table cell (no pipes, no markup, one line)."""
    out = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    for ch in "`*_[]<>#":
        out = out.replace(ch, "\\" + ch)
    return out


def _md_lines(ev: Evidence, members: Collection[str] | None) -> list[str]:
    lines = [INTRO, "", "| item | asks | answered by | cannot answer |", "|---|---|---|---|"]
    for it in items(ev, members):
        facts = "<br>".join(_md(f.text()) for f in it.facts) or "nothing in the bundle"
        cannot = "<br>".join(_md(c) for c in it.cannot) or "-"
        lines.append(f"| {_md(it.ref)} ({it.status}) | {_md(it.asks)} | {facts} | {cannot} |")
    return lines


def _html_body(ev: Evidence, members: Collection[str] | None) -> str:
    e = html.escape
    rows = []
    for it in items(ev, members):
        facts = "".join(f"<li>{e(f.text())}</li>" for f in it.facts) or "<li>nothing</li>"
        cannot = "".join(f"<li>{e(c)}</li>" for c in it.cannot) or "<li>-</li>"
        rows.append(
            f'<tr class="annex-{e(it.status.replace(" ", "-"))}">'
            f"<th>{e(it.ref)}<br><small>{e(it.status)}</small></th><td>{e(it.asks)}</td>"
            f"<td><ul>{facts}</ul></td><td><ul>{cannot}</ul></td></tr>"
        )
    return (
        f"<p>{e(INTRO)}</p>"
        '<table class="annex-iv"><thead><tr><th>item</th><th>asks</th><th>answered by</th>'
        "<th>cannot answer</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def markdown_section(ev: Evidence, members: Collection[str] | None = None) -> str:
    """The report's Markdown section (a ``##`` heading, a table, one row per item)."""
    return "\n".join([f"## {TITLE}", "", *_md_lines(ev, members)]) + "\n"


def html_section(ev: Evidence, members: Collection[str] | None = None) -> str:
    """The report page's section (``<section id="annex-iv">``), every value escaped."""
    return (
        f'<section id="annex-iv"><h2>{html.escape(TITLE)}</h2>{_html_body(ev, members)}</section>\n'
    )


def section(ev: Evidence, members: Collection[str] | None = None) -> Section:
    """The map as a section of the report (``report.markdown`` and ``report.html_page``
    take it in ``sections``): the same table as :func:`markdown_section` and
    :func:`html_section`, under the report's own heading."""
    return Section(TITLE, _md_lines(ev, members), _html_body(ev, members))
