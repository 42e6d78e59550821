"""The human report of a bundle: Markdown, and a standalone HTML page.

Both show the verdict, why, the original and the latest replay side by side, every replay,
and every provenance gap.  The HTML page has its CSS inline and a Content-Security-Policy
that forbids any fetch, so it opens the same offline, in a mail client or in an archive
years later.  Every value comes from a manifest, which is untrusted input: it is escaped.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from replay_tui.compare.states import FAILING, PASSING, with_states, words
from replay_tui.evidence.gather import Evidence, ReplayEntry
from replay_tui.evidence.svg import metric_svg
from replay_tui.gaps import Gap
from replay_tui.safety import escape_control
from storage.manifest import ArtifactInfo, RunManifest

if TYPE_CHECKING:
    from replay_tui.compare.comparison import Comparison

State = str
"""A row's state: a field's ``same``/``differs``/``info``, or an output's item state as
the comparison judged it (``compare.states``: ``within_noise``, ``outside_noise`` ...)."""

VERDICT_TEXT = {
    "IDENTICAL": "every artifact's sha256 and every metric are bit-for-bit equal",
    "EQUIVALENT": "not bit-identical, but every metric and tensor is within tolerance",
    "WITHIN_NOISE": (
        "reproduced within this run's noise; not bit-identical: the replay is beyond the"
        " fixed tolerance, but every metric's final value and its mean over the last steps"
        " lie within the prediction interval of the run's own replicas (its measured noise"
        " floor)"
    ),
    "DIVERGED": "the replay left tolerance: the run did not reproduce",
    "INCOMPLETE": "the replay failed, or something needed to compare it is missing",
}
NOT_REPLAYED = "never replayed: nothing here shows that this run can be reproduced"
NO_VERDICT = "replayed, but no replay reached a verdict (see the replays and their reasons)"


@dataclass(frozen=True)
class Row:
    section: str
    label: str
    original: str
    replay: str
    state: State


def _s(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return escape_control(str(v))  # manifest strings: no terminal escapes in a report


def _short(v: str | None, n: int = 16) -> str:
    if not v:
        return "—"
    return v[7 : 7 + n] if v.startswith("sha256:") else v[:n]


def _art(x: ArtifactInfo | None) -> str | None:
    """An artifact's sha256, or that the run did not write it."""
    if x is None:
        return None
    return f"stale ({x.stale})" if x.stale is not None else x.sha256


def side_by_side(
    a: RunManifest, b: RunManifest | None, comparison: Comparison | None = None
) -> list[Row]:
    """Original and replay, field by field; ``info`` rows describe and are not judged.
    With the pair's ``comparison``, each artifact and metric row carries the state the
    comparison gave that item (never judged again here)."""
    rows: list[Row] = []
    judged_as: dict[tuple[str, str], str] = {}
    if comparison is not None and b is not None:
        c = with_states(comparison)
        judged_as |= {("artifacts", x.path): x.state for x in c.artifacts if x.state}
        judged_as |= {("metrics", m.name): m.state for m in c.metrics if m.state}

    def add(section: str, label: str, va: object, vb: object, judged: bool = True) -> None:
        sa = _s(va)
        sb = _s(vb) if b is not None else "—"
        if not judged or b is None:
            state: State = "info"
        elif (section, label) in judged_as:
            state = judged_as[(section, label)]
        else:
            state = "same" if va == vb else "differs"
        rows.append(Row(section, label, sa, sb, state))

    add("run", "run id", a.run_id, b.run_id if b else None, judged=False)
    add("run", "status", a.status, b.status if b else None)
    add("run", "exit code", a.exit_code, b.exit_code if b else None)
    add("run", "started", a.started_at, b.started_at if b else None, judged=False)
    dur_b = f"{b.duration_s:.1f}s" if b and b.duration_s is not None else None
    dur_a = f"{a.duration_s:.1f}s" if a.duration_s is not None else None
    add("run", "duration", dur_a, dur_b, judged=False)
    add("run", "backend", "(original)", b.replay.backend if b and b.replay else None, False)
    add("code", "commit", a.code.commit, b.code.commit if b else None)
    add("code", "uncommitted diff", a.code.diff_sha256, b.code.diff_sha256 if b else None)
    ia, ib = a.image, b.image if b else None
    add("image", "digest", ia.digest if ia else None, ib.digest if ib else None)
    add("image", "image id", ia.image_id if ia else None, ib.image_id if ib else None)
    ea, eb = a.environment, b.environment if b else None
    for label, attr in (
        ("python", "python_version"),
        ("torch", "torch_version"),
        ("CUDA", "cuda_version"),
        ("cuDNN", "cudnn_version"),
        ("OS", "os"),
        ("packages sha256", "packages_sha256"),
    ):
        add("environment", label, getattr(ea, attr), getattr(eb, attr) if eb else None)
    ha, hb = a.hardware, b.hardware if b else None

    def gpus(m: RunManifest | None) -> str | None:
        if m is None or not m.hardware.gpus:
            return None
        return ", ".join(g.name for g in m.hardware.gpus)

    add("hardware", "GPUs", gpus(a), gpus(b))
    add("hardware", "driver", ha.driver_version, hb.driver_version if hb else None)
    add("hardware", "CPU", ha.cpu_model, hb.cpu_model if hb else None, judged=False)
    add("inputs", "config hash", a.config_hash, b.config_hash if b else None)
    add("inputs", "seed", a.randomness.seed, b.randomness.seed if b else None)
    data_b = {d.name: d.sha256 for d in b.data} if b else {}
    for d in a.data:
        add("data", d.name, d.sha256, data_b.get(d.name))
    arts_a = {x.path: x for x in a.outputs.artifacts}
    arts_b = {x.path: x for x in b.outputs.artifacts} if b else {}
    for path in [*arts_a, *(p for p in arts_b if p not in arts_a)]:
        xa, xb = arts_a.get(path), arts_b.get(path)
        # a stale file (listed, not written by the run) is no output: stale or absent on
        # both sides is not judged
        unwritten = all(x is None or x.stale is not None for x in (xa, xb))
        add("artifacts", path, _art(xa), _art(xb), judged=not unwritten)
    met_b = b.outputs.metrics if b else {}
    for name in sorted(set(a.outputs.metrics) | set(met_b)):
        add("metrics", name, a.outputs.metrics.get(name), met_b.get(name))
    return rows


_BEYOND = "beyond the fixed tolerance: "


def _reasons(latest: ReplayEntry | None) -> list[str]:
    c = latest.comparison if latest is not None else None
    if c is None:
        return []
    reasons = list(c.reasons)
    if c.verdict == "WITHIN_NOISE":  # a body stored before the words said what they are
        reasons = [
            f"within noise, beyond the fixed tolerance only: {r[len(_BEYOND) :]}"
            if r.startswith(_BEYOND)
            else r
            for r in reasons
        ]
    return (
        [f"probable cause: {x}" for x in c.probable_causes]
        + [f"shared by both runs (not what tells them apart): {x}" for x in c.shared_causes]
        + reasons
    )


def _claims(latest: ReplayEntry | None) -> list[str]:
    """What the noise rule claims beside the latest verdict (``noise_rule.claims``): a
    WITHIN_NOISE's smallest change it could have seen, a declared margin's TOST claim."""
    from replay_tui.compare.noise_rule import claims

    c = latest.comparison if latest is not None else None
    return claims(c.noise) if c is not None else []


def _verdict_line(ev: Evidence) -> tuple[str, str]:
    latest = ev.latest
    if latest is not None and latest.word != latest.verdict:  # a chosen aborted attempt
        return latest.word, (
            "this replay did not complete, so it is not a verdict"
            + (f" (its partial outputs compared {latest.verdict})" if latest.verdict else "")
        )
    v = ev.verdict
    cmp = latest.comparison if latest is not None else None
    if v in ("DIVERGED", "INCOMPLETE") and cmp is not None and cmp.reasons:
        return v, cmp.headline + _noise_clause(ev)  # its first reason, in the same words
    if v:
        return v, VERDICT_TEXT.get(v, "") + _noise_clause(ev)
    if ev.replays:
        return "NO VERDICT", NO_VERDICT
    return "NOT REPLAYED", NOT_REPLAYED


def _noise_clause(ev: Evidence) -> str:
    """How the latest comparison was judged against the noise floor, in plain words."""
    latest = ev.latest
    cmp = latest.comparison if latest is not None else None
    if cmp is None or cmp.noise is None or cmp.floor is None:
        return ""
    f = cmp.floor
    rule = (
        f"; judged against noise floor #{f.fact_id} ({f.k} replicas, measured"
        f" {f.created_at}) with alpha={cmp.alpha:g}"
        + (f", margin={cmp.margin:g}" if cmp.margin is not None else "")
        + f", rtol={cmp.rtol:g}, atol={cmp.atol:g} (noise_floor.json holds the floor)"
    )
    if cmp.verdict == "DIVERGED":
        exits = [b for b in cmp.noise.bands if b.leaves_band_at is not None]
        if exits:
            first = min(exits, key=lambda b: b.leaves_band_at or 0)
            rule += f"; {first.metric} leaves the noise band at step {first.leaves_band_at}"
    return rule


def _all_gaps(ev: Evidence) -> list[tuple[str, Gap]]:
    out = [("original", g) for g in ev.gaps]
    latest = ev.latest
    if latest is not None:
        out += [("replay", g) for g in latest.gaps]
        out += [("original vs replay", g) for g in latest.pair_gaps]
    return out


# -- sections ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One more section of the report, in both forms: its title, its Markdown lines (each
    already escaped with ``md``) and its HTML (already escaped with ``h``).  A module that
    adds a section builds one of these and passes it to :func:`markdown` and
    :func:`html_page`."""

    title: str
    markdown: Sequence[str]
    html: str


@dataclass(frozen=True)
class Audit:
    """What the export knows that the store's evidence does not: who signs, the store's
    ledger head, and the bisects with this run as GOOD or BAD (``RunStore.bisects_of``)."""

    key_id: str | None = None
    ledger_head: str | None = None
    bisects: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def candidate_sentence(ev: Evidence) -> str:
    """Which run is the candidate, and why, in one sentence."""
    latest = ev.latest
    if latest is None:
        return (
            f"There is no candidate: the original {ev.original.run_id} has no completed replay"
            " with a verdict, so nothing here was judged."
        )
    cmp = latest.comparison
    rid = latest.run_id or "(unknown)"
    how = (
        "chosen with export --replay"
        if ev.chosen is not None
        else "the latest completed replay with a verdict and determinism as recorded"
    )
    if cmp is not None and cmp.floor is not None:
        f = cmp.floor
        cand = cmp.a_run if f.candidate == "a" else cmp.b_run
        if cand == rid:
            return (
                f"The candidate is the replay {rid} ({how}): it is not one of the {f.k}"
                f" replicas of noise floor #{f.fact_id}, so it was judged against their spread."
            )
        return (
            f"The candidate is the run {cand}: its comparison with the replay {rid} ({how})"
            f" took the replay as one of the {f.k} replicas of noise floor #{f.fact_id}, so"
            f" {cand} was judged against their spread."
        )
    return (
        f"The candidate is replay {rid}: it is {how}, compared with the original"
        f" {ev.original.run_id}."
    )


def _bisect_line(b: Mapping[str, Any]) -> str:
    body = b.get("body")
    body = body if isinstance(body, Mapping) else {}
    causes = [c for c in str(b.get("causes") or "").split(",") if c]
    if b.get("outcome") == "cause":
        answer = "cause found: " + (", ".join(causes) if causes else "see its verdict")
    else:
        answer = "unexplained: no single difference accounts for it"
    verdict = body.get("verdict")
    return (
        f"bisect #{b.get('id')} ({str(b.get('created_at') or '')[:19]}): GOOD"
        f" {b.get('good_run')}, BAD {b.get('bad_run')}; {answer}"
        + (f" — {verdict}" if isinstance(verdict, str) and verdict else "")
    )


def auditor_section(ev: Evidence, audit: Audit | None) -> Section:
    """What an auditor reads first: the candidate and why, the signer's key id, the
    store's ledger head, and every bisect in the bundle with its answer."""
    audit = audit or Audit()
    signer = (
        f"signed with key {audit.key_id} (its public half is in the bundle)"
        if audit.key_id
        else "not signed (export --key signs the bundle)"
    )
    head = (
        f"{audit.ledger_head} (verify-store --anchor takes it)"
        if audit.ledger_head
        else "not recorded"
    )
    bisects = [_bisect_line(b) for b in audit.bisects]
    items = [
        ("Candidate", [candidate_sentence(ev)]),
        ("Signer", [signer]),
        ("Store ledger head", [head]),
        (
            f"Bisects in this bundle ({len(bisects)})",
            bisects or ["none: no bisect had this run as GOOD or BAD (bisects.json absent)"],
        ),
    ]
    md: list[str] = []
    html_parts = ['<dl class="auditor">']
    for title, lines in items:
        md.append(
            f"**{title}.** "
            + ("" if len(lines) > 1 or title.startswith("Bisects") else _md(lines[0]))
        )
        if len(lines) > 1 or title.startswith("Bisects"):
            md += [f"- {_md(x)}" for x in lines]
        md.append("")
        html_parts.append(f"<dt>{_h(title)}</dt>")
        html_parts += [f"<dd>{_h(x)}</dd>" for x in lines]
    html_parts.append("</dl>")
    return Section("For the auditor", md[:-1], "".join(html_parts))


SectionBuilder = Callable[[Evidence], Section]
"""How another module adds a section: a function of the evidence."""


# -- Markdown ---------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def _md(v: object) -> str:
    text = " ".join(_s(v).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return out


def _replay_rows(ev: Evidence) -> list[list[object]]:
    rows: list[list[object]] = []
    for r in ev.replays:
        f = r.fact
        m = r.manifest
        rows.append(
            [
                r.run_id or "—",
                (f.created_at if f else None) or (m.started_at if m else None),
                (f.backend if f else None) or (m.replay.backend if m and m.replay else None),
                (f.status if f else None) or (m.status if m else None),
                r.word,
                "off" if r.determinism_off else "recorded",
                (f.reason if f else None) or (m.replay.reason if m and m.replay else None),
            ]
        )
    return rows


REPLAY_HEADERS = ("replay run", "when", "backend", "status", "verdict", "determinism", "reason")


def markdown(
    ev: Evidence,
    exported_at: str,
    audit: Audit | None = None,
    sections: Sequence[Section] = (),
) -> str:
    """The report in Markdown; ``audit``: what the export knows (the signer, the ledger
    head, the bisects); ``sections``: more sections, each before "Checking this bundle"."""
    m = ev.original
    verdict, why = _verdict_line(ev)
    latest = ev.latest
    lines = [
        f"# Evidence: run {_md(m.run_id)}" + (f" ({_md(m.name)})" if m.name else ""),
        "",
        f"**Verdict: {verdict}** — {_md(why)}",
        "",
    ]
    if latest is not None:
        lines.append(f"Latest replay: `{latest.run_id}`.")
    lines += [f"- {_md(r)}" for r in _reasons(latest)]
    lines += [
        "",
        f"Exported {exported_at}. Manifest sha256 `{m.integrity.manifest_sha256}`.",
        f"Command: `{' '.join(m.argv).replace('`', chr(39))}` (workdir `{m.workdir}`).",
        "",
        "## Original and latest replay, side by side",
        "",
    ]
    rows = side_by_side(m, latest.manifest if latest else None, _cmp(ev))
    lines += _md_table(
        ["section", "field", "original", "replay", ""],
        [[r.section, r.label, r.original, r.replay, _mark(r.state)] for r in rows],
    )
    lines += ["", f"## Replays ({len(ev.replays)})", ""]
    if ev.replays:
        lines += _md_table(REPLAY_HEADERS, _replay_rows(ev))
    else:
        lines.append("None: `replay-tui replay RUN` or `replay-tui drill`.")
    gaps = _all_gaps(ev)
    lines += ["", f"## Provenance gaps ({len(gaps)})", ""]
    if gaps:
        lines += _md_table(
            ["of", "severity", "code", "field", "what", "fix"],
            [[w, g.severity, g.code, g.field, g.message, g.remediation] for w, g in gaps],
        )
    else:
        lines.append("None.")
    for section in [auditor_section(ev, audit), *sections]:
        lines += ["", f"## {section.title}", "", *section.markdown]
    lines += [
        "",
        "## Checking this bundle",
        "",
        "`replay-tui verify DIR --key KEY.pub` re-hashes every file and checks the signature"
        " offline; `sha256sum -c SHA256SUMS` checks the files alone.",
        "",
    ]
    return escape_control("\n".join(lines), keep_newlines=True)


def _mark(state: State) -> str:
    """A row's last cell: a field's ``same``/``differs``, an output's state in words
    (only a failed state in capitals)."""
    if state in ("same", "info"):
        return "same" if state == "same" else ""
    if state == "differs":
        return "differs"
    return words(state).upper() if state in FAILING else words(state)


def _row_class(state: State) -> str:
    if state in PASSING:
        return "reproduced"
    if state in FAILING:
        return "failed"
    return state if state in ("same", "differs", "info") else "info"


def _cmp(ev: Evidence) -> Comparison | None:
    latest = ev.latest
    return latest.comparison if latest is not None else None


# -- HTML -------------------------------------------------------------------------------

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
  max-width: 1150px; color: #1b1f24; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 12px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d0d7de; }
code, td.v { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace;
  font-size: 12.5px; }
.verdict { font-size: 20px; font-weight: 700; padding: 12px 16px; border-radius: 6px;
  margin: 8px 0; border: 2px solid; }
.verdict small { display: block; font-size: 14px; font-weight: 400; }
.verdict-identical, .verdict-equivalent, .verdict-within_noise { background: #dafbe1;
  border-color: #1a7f37; }
.verdict-diverged { background: #ffebe9; border-color: #cf222e; }
.verdict-incomplete, .verdict-none { background: #fff8c5; border-color: #9a6700; }
table { border-collapse: collapse; width: 100%; margin: 6px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
td.v { word-break: break-all; }
td.section, td.state { white-space: nowrap; }
th { background: #f6f8fa; }
tr.failed td { background: #ffebe9; }
tr.same td.state, tr.reproduced td.state { color: #1a7f37; }
tr.differs td.state { color: #9a6700; }
tr.failed td.state { color: #cf222e; font-weight: 700; }
ul.claims { margin: 4px 0 8px; font-weight: 600; }
.auditor dt { font-weight: 700; margin-top: 6px; }
.auditor dd { margin-left: 16px; }
td.section { color: #57606a; }
.sev-critical { color: #cf222e; font-weight: 700; }
.sev-warning { color: #9a6700; font-weight: 700; }
.meta { color: #57606a; }
.metrics { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr));
  gap: 4px 24px; }
figure.metric { margin: 10px 0 14px; min-width: 0; }
figure.metric svg { display: block; max-width: 100%; height: auto;
  border: 1px solid #d0d7de; border-radius: 6px; }
figure.metric figcaption { margin-top: 4px; color: #57606a; }
figure.metric figcaption code { color: #1b1f24; }
"""


def _h(v: object) -> str:
    return html.escape(_s(v), quote=True)


def _html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    cls: str = "",
    row_classes: Sequence[str] | None = None,
    cell_classes: Sequence[str] | None = None,
) -> str:
    out = [f'<table class="{_h(cls)}">' if cls else "<table>", "<thead><tr>"]
    out += [f"<th>{_h(x)}</th>" for x in headers]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(rows):
        rc = row_classes[i] if row_classes else ""
        out.append(f'<tr class="{_h(rc)}">' if rc else "<tr>")
        for j, c in enumerate(r):
            cc = cell_classes[j] if cell_classes else ""
            out.append(f'<td class="{_h(cc)}">{_h(c)}</td>' if cc else f"<td>{_h(c)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


# -- metric plots -------------------------------------------------------------------------

MAX_PLOTS = 24
"""Metrics plotted in the HTML page (by name); the rest are counted, not drawn."""

Band = Sequence[tuple[int, float, float]]
"""A noise band: ``(step, lo, hi)`` per step, the range the replicas' values spanned."""
NoiseBand = tuple[Band, int | None]
"""A metric's noise band and the step where the latest replay leaves it (None: never)."""


def _noise_bands(ev: Evidence) -> dict[str, NoiseBand]:
    """The noise band of each metric, and where the latest replay leaves it.

    The seam for the replicas' noise floor: ``Evidence`` has no such field yet, so this is
    ``{}`` today.  Once it carries ``noise_bands: Mapping[str, tuple[band, exit_step]]``
    (``band`` a sequence of ``(step, lo, hi)``, ``exit_step`` an int or None), the plots
    shade the band and mark the exit.  An entry of another shape is left out, not fatal:
    the report of a run must still be written.
    """
    raw = getattr(ev, "noise_bands", None)
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, NoiseBand] = {}
    for name, entry in raw.items():
        try:
            band_raw, exit_raw = entry
            band = [(int(s), float(lo), float(hi)) for s, lo, hi in band_raw]
            exit_step = None if exit_raw is None else int(exit_raw)
        except (TypeError, ValueError, OverflowError):
            continue
        if isinstance(name, str):
            out[name] = (band, exit_step)
    return out


def _metric_caption(
    name: str, original: RunManifest, replay: RunManifest | None, nb: NoiseBand | None
) -> str:
    hist = original.outputs.metric_history[name]
    parts = [f"<code>{_h(name)}</code>: {len(hist)} point{'s' if len(hist) != 1 else ''}"]
    times = original.outputs.metric_times.get(name)
    if times and math.isfinite(times[-1]):
        parts.append(f"logged over {times[-1]:.1f}s of the original run")
    if replay is None:
        parts.append("no replay to compare")
    elif name not in replay.outputs.metric_history:
        parts.append("the latest replay logged no history of it")
    else:
        parts.append(f"latest replay: {len(replay.outputs.metric_history[name])} points")
    if nb is not None and nb[1] is not None:
        parts.append(f"leaves the noise band at step {nb[1]}")
    return "; ".join(parts)


def distance_series(
    points: Sequence[tuple[int, float]] | None, band: Band
) -> list[tuple[int, float]] | None:
    """``points`` as their distance from the replicas' mean (the band's middle) at the
    band's steps."""
    if points is None:
        return None
    mean = {int(s): (lo + hi) / 2 for s, lo, hi in band}
    return [(int(s), float(v) - mean[int(s)]) for s, v in points if int(s) in mean]


def _floored_words(name: str, cmp: Comparison | None) -> str | None:
    """Where a half-width of ``name`` was raised to the numerical floor, that in words."""
    if cmp is None or cmp.noise is None:
        return None
    from replay_tui.compare.noise_params import NoiseParams
    from replay_tui.compare.noise_rule import floored_words

    params = NoiseParams(alpha=cmp.alpha)
    for e in cmp.noise.endpoints:
        if e.metric == name and e.floored:
            return floored_words(e, params)
    return None


def _distance_figure(
    name: str,
    original: RunManifest,
    replay: RunManifest | None,
    nb: NoiseBand,
    cmp: Comparison | None,
) -> str:
    """The metric as its distance from the replicas' mean, the band as ±h around zero:
    a band of 0.1 % of the value fills the plot."""
    band, exit_step = nb
    centred = [(s, lo - (lo + hi) / 2, hi - (lo + hi) / 2) for s, lo, hi in band]
    hist_b = replay.outputs.metric_history.get(name) if replay is not None else None
    svg = metric_svg(
        name,
        distance_series(original.outputs.metric_history[name], band) or [],
        distance_series(hist_b, band),
        centred,
        exit_step,
        xmlns=False,
        distance=True,
    )
    state = None
    if cmp is not None:
        metric = next((x for x in with_states(cmp).metrics if x.name == name), None)
        state = metric.state if metric is not None else None
    parts = [f"<code>{_h(name)}</code>: distance from the replicas' mean, the band ±h"]
    if state is not None:
        parts.append(f"judged {_h(words(state))}")
    if exit_step is not None:
        parts.append(f"leaves the noise band at step {exit_step}")
    floored = _floored_words(name, cmp)
    if floored:
        parts.append(_h(floored))
    return (
        f'<figure class="metric distance">{svg}<figcaption>{"; ".join(parts)}</figcaption></figure>'
    )


def _metrics_section(ev: Evidence) -> list[str]:
    """One plot per metric the original logged a history of: original solid, the latest
    replay dashed, the noise band (when known) shaded."""
    m = ev.original
    latest = ev.latest
    rep = latest.manifest if latest is not None else None
    names = sorted(n for n, h in m.outputs.metric_history.items() if h)
    out = [f"<h2>Metrics ({len(names)})</h2>"]
    if not names:
        out.append("<p>None: the original logged no metric history.</p>")
        return out
    bands = _noise_bands(ev)
    out.append(
        '<p class="meta">Each metric by step: the original solid, the latest replay dashed'
        + (
            ", the replicas' noise band shaded; a metric judged against the noise floor also"
            " as its distance from the replicas' mean, the band as ±h around zero"
            if bands
            else ""
        )
        + ". Values that are not finite are left out.</p>"
    )
    out.append('<div class="metrics">')
    for name in names[:MAX_PLOTS]:
        nb = bands.get(name)
        replay = rep.outputs.metric_history.get(name) if rep is not None else None
        svg = metric_svg(
            name,
            m.outputs.metric_history[name],
            replay,
            nb[0] if nb is not None else None,
            nb[1] if nb is not None else None,
            xmlns=False,  # the HTML parser knows <svg>; the page names no URL
        )
        out.append(
            f'<figure class="metric">{svg}'
            f"<figcaption>{_metric_caption(name, m, rep, nb)}</figcaption></figure>"
        )
        if nb is not None and nb[0]:
            out.append(_distance_figure(name, m, rep, nb, _cmp(ev)))
    out.append("</div>")
    left = len(names) - MAX_PLOTS
    if left > 0:
        out.append(
            f"<p>{left} more metric{'s' if left != 1 else ''} not plotted (the first"
            f" {MAX_PLOTS} by name are); every history is in the manifests.</p>"
        )
    return out


def html_page(
    ev: Evidence,
    exported_at: str,
    audit: Audit | None = None,
    sections: Sequence[Section] = (),
) -> str:
    """The standalone page; ``audit`` and ``sections`` as for :func:`markdown`."""
    m = ev.original
    verdict, why = _verdict_line(ev)
    latest = ev.latest
    vclass = "verdict-" + (ev.verdict or "none").lower()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
        " style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Evidence: run {_h(m.run_id)} — {_h(verdict)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Evidence: run <code>{_h(m.run_id)}</code>"
        + (f" ({_h(m.name)})" if m.name else "")
        + "</h1>",
        f'<div id="verdict" class="verdict {vclass}">Verdict: {_h(verdict)}'
        f"<small>{_h(why)}</small></div>",
    ]
    said = _claims(latest)  # beside the verdict: how strong it is, what a margin shows
    if said:
        parts.append(
            '<ul id="claims" class="claims">' + "".join(f"<li>{_h(x)}</li>" for x in said) + "</ul>"
        )
    if latest is not None:
        parts.append(f'<p class="meta">Latest replay: <code>{_h(latest.run_id)}</code></p>')
    reasons = [r for r in _reasons(latest) if r not in said]
    if reasons:
        parts.append("<ul>" + "".join(f"<li>{_h(r)}</li>" for r in reasons) + "</ul>")
    parts.append(
        f'<p class="meta">Exported {_h(exported_at)}. Manifest sha256'
        f" <code>{_h(m.integrity.manifest_sha256)}</code>.<br>Command:"
        f" <code>{_h(' '.join(m.argv))}</code> (workdir <code>{_h(m.workdir)}</code>)</p>"
    )
    parts += _metrics_section(ev)
    rows = side_by_side(m, latest.manifest if latest else None, _cmp(ev))
    parts.append("<h2>Original and latest replay, side by side</h2>")
    parts.append(
        _html_table(
            ["section", "field", "original", "replay", ""],
            [[r.section, r.label, r.original, r.replay, _mark(r.state)] for r in rows],
            cls="side-by-side",
            row_classes=[_row_class(r.state) for r in rows],
            cell_classes=["section", "", "v", "v", "state"],
        )
    )
    parts.append(f"<h2>Replays ({len(ev.replays)})</h2>")
    if ev.replays:
        parts.append(_html_table(REPLAY_HEADERS, _replay_rows(ev), cls="replays"))
    else:
        parts.append(
            "<p>None: <code>replay-tui replay RUN</code> or <code>replay-tui drill</code>.</p>"
        )
    gaps = _all_gaps(ev)
    parts.append(f"<h2>Provenance gaps ({len(gaps)})</h2>")
    if gaps:
        parts.append(
            _html_table(
                ["of", "severity", "code", "field", "what", "fix"],
                [[w, g.severity, g.code, g.field, g.message, g.remediation] for w, g in gaps],
                cls="gaps",
                row_classes=[f"sev-{g.severity}" for _, g in gaps],
            )
        )
    else:
        parts.append("<p>None.</p>")
    for section in [auditor_section(ev, audit), *sections]:
        parts.append(f"<h2>{_h(section.title)}</h2>{section.html}")
    parts.append(
        "<h2>Checking this bundle</h2><p><code>replay-tui verify DIR --key KEY.pub</code>"
        " re-hashes every file and checks the signature offline;"
        " <code>sha256sum -c SHA256SUMS</code> checks the files alone.</p>"
    )
    parts.append("</body></html>\n")
    return escape_control("\n".join(parts), keep_newlines=True)
