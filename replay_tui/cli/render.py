"""The CLI's text for runs, manifests, gaps and drills (comparisons:
``replay_tui.compare.render``; shared formatters: ``replay_tui.textfmt``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from replay_tui.gaps import Gap, gap_lines
from replay_tui.safety import escape_control
from replay_tui.textfmt import (
    Column,
    cut,
    duration,
    fit_line,
    fit_table,
    output_width,
    short,
    table,
    wrap_line,
)
from replay_tui.verdicts import Reproduction, outcome_word
from storage.manifest import RunManifest
from storage.records import ReplayFact, RunRecord

if TYPE_CHECKING:
    from replay_tui.ops.drill import DrillReport

__all__ = ["cut", "duration", "short", "table"]  # re-exported from replay_tui.textfmt


def image_short(ref: str | None, digest: str | None) -> str:
    """``train:2025.11@cba951d3``: the name:tag (cut with an ellipsis) and the digest's
    start; ``--wide`` shows :func:`image_whole`."""
    tag = cut(ref.rsplit("/", 1)[-1].split("@", 1)[0], 24) if ref else ""
    if digest:
        return f"{tag}@{short(digest, 8)}" if tag else "@" + short(digest, 12)
    return tag or "-"


def image_whole(ref: str | None, digest: str | None) -> str:
    """The reference and the digest it was pinned to, each whole."""
    if ref and digest and digest not in ref:
        return f"{ref}@{digest}" if "@" not in ref else f"{ref} ({digest})"
    return ref or digest or "-"


def gap_badge(rec: RunRecord) -> str:
    if rec.gaps is None:
        return "-"
    return f"{rec.gaps.critical}c/{rec.gaps.warning}w/{rec.gaps.info}i"


CONFIG_SHOWN = 30
"""Hyperparameters ``show`` lists in its text; the rest are counted (``--json``: all)."""
RUN_COLUMNS = ("ID", "NAME", "KIND", "STARTED", "DUR", "COMMIT", "IMAGE", "STATUS", "VERDICT")
RUN_COLUMNS_ALL = (*RUN_COLUMNS, "GAPS")
RUN_FIT = (
    Column("ID"),  # 13 characters, as the TUI shows it: a prefix `show` and `replay` take
    Column("NAME", min=12),
    Column("KIND", drop=6),
    Column("STARTED", drop=7),
    Column("DUR", drop=3),
    Column("COMMIT", drop=2),
    Column("IMAGE", drop=1),
    Column("STATUS", drop=5),
    Column("VERDICT", min=13),
    Column("GAPS", drop=4),
)
"""How the runs table gives way on a narrow screen: NAME and VERDICT are cut (with an
ellipsis), then IMAGE, COMMIT, DUR, GAPS, STATUS, KIND and STARTED are left out in that
order; the id prefix is never cut."""
assert tuple(c.header for c in RUN_FIT) == RUN_COLUMNS_ALL


def left_out(dropped: Sequence[str], width: int, how: str) -> list[str]:
    """The line under a table that left columns out to fit ``width``: never silently."""
    if not dropped:
        return []
    return wrap_line(f"({', '.join(dropped)} left out to fit {width} columns; {how})", width)


def verdict_cell(
    rec: RunRecord,
    reproduction: Mapping[str, Reproduction] | None,
    aborted: Mapping[str, str] | None = None,
) -> str:
    """An original run: what all its replays add up to (``IDENTICAL 3/3, 1 cancelled``);
    a replay: the verdict of its own comparison, or how its attempt ended when it did not
    complete (``CANCELLED``: ``replay_tui.verdicts.aborted_replays``)."""
    rep = (reproduction or {}).get(rec.id)
    if rep is not None and rec.kind == "original":
        return rep.text()
    return (aborted or {}).get(rec.id) or rec.last_verdict or "-"


def run_rows(
    records: Sequence[RunRecord],
    reproduction: Mapping[str, Reproduction] | None = None,
    *,
    wide: bool = False,
    aborted: Mapping[str, str] | None = None,
) -> list[list[str]]:
    """The runs table's cells; cut values end in an ellipsis (``wide``: nothing is cut)."""
    return [
        [
            r.id if wide else r.id[:13],
            cut(r.name or "-", None if wide else 28),
            r.kind,
            r.started_at[:19].replace("T", " "),
            duration(r.duration_s),
            (r.commit or "-") if wide else short(r.commit, 8),
            image_whole(r.image_ref, r.image_digest)
            if wide
            else image_short(r.image_ref, r.image_digest),
            r.status,
            verdict_cell(r, reproduction, aborted),
            gap_badge(r),
        ]
        for r in records
    ]


def runs_table(
    records: Sequence[RunRecord],
    reproduction: Mapping[str, Reproduction] | None = None,
    *,
    wide: bool = False,
    filtered: bool = False,
    aborted: Mapping[str, str] | None = None,
    width: int | None = None,
) -> str:
    """The runs, one row each, fitted to ``width`` cells (None or ``wide``: whole)."""
    if not records:
        if filtered:
            text = "no run matches (the search and filters given); `replay-tui runs` lists all"
        else:
            text = (
                "no runs (record one with `replay-tui record -- CMD` or `replay-tui ingest FILE`)"
            )
        return "\n".join(wrap_line(text, width))
    rows = run_rows(records, reproduction, wide=wide, aborted=aborted)
    if wide:
        return table(RUN_COLUMNS_ALL, rows)
    fitted = fit_table(RUN_FIT, rows, width)
    if width is None:
        return fitted.text
    return "\n".join([*fitted.lines, *left_out(fitted.dropped, width, "--wide shows them")])


def gaps_text(gaps: Sequence[Gap], width: int | None = None) -> str:
    """The gaps, most severe first, each line wrapped to ``width`` cells (None: whole)."""
    if not gaps:
        return "no provenance gaps"
    return "\n".join(w for ln in gap_lines(gaps) for w in wrap_line(ln, width))


class _Prose(str):
    """A line of ``show`` that is prose: wrapped to the screen, not cut."""


def _kv(title: str, pairs: Sequence[tuple[str, Any]]) -> list[str]:
    out = [f"── {title}"]
    for k, v in pairs:
        if isinstance(v, list | dict):
            v = json.dumps(v) if len(json.dumps(v)) < 90 else f"{len(v)} entries"
        out.append(f"  {k:<26} {'-' if v is None else v}")
    return out


def gpu_text(names: Sequence[str]) -> str:
    """A machine's GPUs, alike ones counted: ``8 × NVIDIA H100 80GB HBM3``."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{c} × {n}" if c > 1 else n for n, c in counts.items())


def manifest_text(
    rec: RunRecord,
    m: RunManifest,
    gaps: Sequence[Gap],
    replays: Sequence[ReplayFact],
    bisects: Sequence[Mapping[str, Any]] = (),
    width: int | None = None,
) -> str:
    """``show``'s text.  With a ``width``, each line fits it: values are cut with an
    ellipsis (and a last line says so: ``show --wide`` has them whole),
    prose (gaps, verdicts) is wrapped, the replays give way as a table does."""
    img = m.image
    lines = [
        f"run {m.run_id}  {m.name or ''}".rstrip(),
        f"  {m.kind}, {m.status} (exit {m.exit_code}), started {m.started_at},"
        f" {duration(m.duration_s)}" + (f", replay of {m.replay_of}" if m.replay_of else ""),
        f"  manifest sha256 {m.integrity.manifest_sha256}",
        f"  command: {' '.join(m.argv) or '-'}",
        f"  workdir: {m.workdir}",
    ]
    lines += _kv(
        "code",
        [
            ("repo_url", m.code.repo_url),
            ("commit", m.code.commit),
            ("branch", m.code.branch),
            ("dirty", m.code.dirty),
            ("diff_sha256", m.code.diff_sha256),
            ("untracked", m.code.untracked or None),
        ],
    )
    lines += _kv(
        "image",
        [
            ("reference", img.reference if img else None),
            ("digest", img.digest if img else None),
            ("image_id", img.image_id if img else None),
            ("platform", img.platform if img else None),
        ],
    )
    lines.append("── data")
    for d in m.data or []:
        lines.append(
            f"  {d.name:<16} {d.path}  sha256 {short(d.sha256, 16)}  {d.file_count or '-'} files"
            f"  {d.size_bytes or '-'} bytes"
        )
    if not m.data:
        lines.append("  (none recorded)")
    config = sorted(m.config.items())
    lines += _kv("config", [("config_hash", m.config_hash), *config[:CONFIG_SHOWN]])
    if len(config) > CONFIG_SHOWN:  # never dropped silently
        lines.append(f"  … {len(config) - CONFIG_SHOWN} more keys (`show --json` has them all)")
    lines += _kv("randomness", list(m.randomness.model_dump().items()))
    lines += _kv("determinism", list(m.determinism.model_dump().items()))
    env = m.environment.model_dump()
    if env.get("packages"):
        env["packages"] = f"{len(env['packages'])} packages"
    lines += _kv("environment", list(env.items()))
    hw = m.hardware.model_dump()
    if hw.get("gpus"):
        hw["gpus"] = gpu_text([g["name"] for g in hw["gpus"]])
    lines += _kv("hardware", list(hw.items()))
    lines.append("── outputs")
    for a in m.outputs.artifacts:
        if a.stale is not None:  # listed, but not an output of this run
            lines.append(f"  {a.kind:<10} {a.path}  stale: {a.stale}")
            continue
        lines.append(f"  {a.kind:<10} {a.path}  sha256 {short(a.sha256, 16)}  {a.size_bytes} B")
    for k, v in sorted(m.outputs.metrics.items()):
        n = len(m.outputs.metric_history.get(k, []))
        lines.append(f"  metric {k} = {v!r}" + (f"  ({n} steps)" if n else ""))
    if m.outputs.log_tail and m.status != "succeeded":
        lines.append("── log tail")
        lines += ["  " + ln for ln in m.outputs.log_tail.splitlines()[-15:]]
    lines.append("── gaps")
    lines += [_Prose("  " + ln) for ln in gaps_text(gaps).splitlines()]
    lines.append("── replays")
    if not replays:
        lines.append("  (none yet: `replay-tui replay RUN`)")
    lines += replay_lines(replays, width)
    lines += bisect_lines(rec.id, bisects, width)
    lines.append(f"── signed evidence bundle: {'yes' if rec.signed else 'no'}")
    return _fit_show(lines, width)


def _fit_show(lines: Sequence[str], width: int | None) -> str:
    """``show``'s lines escaped (manifest strings are untrusted) and fitted to ``width``:
    prose wrapped, the rest cut, and a last line when anything was cut."""
    out: list[str] = []
    was_cut = False
    for line in lines:
        for ln in escape_control(line, keep_newlines=True).splitlines() or [""]:
            if width is None:
                out.append(ln)
            elif isinstance(line, _Prose):
                out += wrap_line(ln.expandtabs(), width)
            else:
                fitted = fit_line(ln.expandtabs(), width)
                was_cut |= fitted != ln.expandtabs()
                out.append(fitted)
    if was_cut and width is not None:
        out += wrap_line(
            f"(… ends a value cut to fit {width} columns; `show --wide` shows it whole)",
            width,
        )
    return "\n".join(out)


REPLAY_FIT = (
    Column("#"),
    Column("CREATED", drop=2),
    Column("BACKEND", drop=3),
    Column("STATUS", drop=1),
    Column("OUTCOME"),
    Column("REPLAY RUN", min=13),
    Column("REASON", min=12, drop=4),
)
"""``show``'s replays on a narrow screen: the replay run's id is cut to its 13-character
prefix, the reason cut, then the status (the outcome says it too), the time, the backend
and the reason are left out."""


def replay_lines(replays: Sequence[ReplayFact], width: int | None = None) -> list[str]:
    """``show``'s replays, numbered per run, oldest first, one line each (no header)."""
    rows = [
        [
            f"{i:>2}.",
            r.created_at[:19],
            r.backend or "-",
            r.status,
            outcome_word(r.status, r.verdict),
            r.replay_run or "",
            r.reason or "",
        ]
        for i, r in enumerate(replays, 1)
    ]
    return fit_table(REPLAY_FIT, rows, width, indent="  ", sep=" ", header=False).lines


def bisect_summary(run_id: str, fact: Mapping[str, Any]) -> dict[str, Any]:
    """A stored bisect (a row of ``RunStore.bisects_of``) as ``show --json`` lists it:
    what ``run_id`` was in it (GOOD or BAD), what it found, and its whole answer."""
    raw = fact.get("body")
    body: dict[str, Any] = raw if isinstance(raw, dict) else {}
    probes = body.get("probes_run")
    return {
        "id": fact["id"],
        "created_at": fact["created_at"],
        "good_run": fact["good_run"],
        "bad_run": fact["bad_run"],
        "role": "GOOD" if fact["good_run"] == run_id else "BAD",
        "outcome": fact["outcome"],
        "causes": [c for c in str(fact.get("causes") or "").split(",") if c],
        "verdict": body.get("verdict"),
        "probes_run": probes if isinstance(probes, int) else len(body.get("probes") or []),
        "body": body,
    }


BISECT_FIT = (
    Column("N"),
    Column("ID"),
    Column("CREATED", drop=1),
    Column("ROLE"),
    Column("OTHER", min=16),  # "vs " and the other run's 13-character prefix
    Column("FOUND"),
)


def bisect_lines(
    run_id: str, bisects: Sequence[Mapping[str, Any]], width: int | None = None
) -> list[str]:
    """``show``'s bisects section: each bisect the run took part in, oldest first."""
    lines = ["── bisects"]
    if not bisects:
        lines.append("  (none: `replay-tui bisect GOOD BAD`)")
    found = [bisect_summary(run_id, fact) for fact in bisects]
    rows = []
    for i, b in enumerate(found, 1):
        other = b["bad_run"] if b["role"] == "GOOD" else b["good_run"]
        outcome = "CAUSE FOUND" if b["outcome"] == "cause" else "UNEXPLAINED"
        rows.append(
            [
                f"{i:>2}.",
                f"#{b['id']}",
                str(b["created_at"])[:19],
                b["role"],
                f"vs {other}",
                f"{outcome} after {b['probes_run']} probe(s)",
            ]
        )
    fitted = fit_table(BISECT_FIT, rows, width, indent="  ", sep=" ", header=False)
    for b, line in zip(found, fitted.lines, strict=True):
        lines.append(line)
        if b["verdict"]:
            lines.append(_Prose(f"      {b['verdict']}"))
    return lines


DRILL_FIT = (
    Column("RUN"),
    Column("NAME", min=12),
    Column("RESULT", drop=3),
    Column("VERDICT"),
    Column("REPLAY", drop=2),
    Column("TIME", drop=1),
    Column("REASON", min=12, drop=4),
)
"""A drill's table on a narrow screen: the name and the reason are cut, then the time,
the replay's id, the result (the verdict says it) and the reason are left out."""


def drill_table(rep: DrillReport, width: int | Literal["terminal"] | None = "terminal") -> str:
    """A drill's runs, one row each, and its one-line outcome, fitted to ``width`` cells
    (``terminal``: :func:`~replay_tui.textfmt.output_width`; None: whole)."""
    if width == "terminal":
        width = output_width()
    whole = width is None  # --wide: the name and the reason whole
    rows = [
        [
            short(i.run_id, 13),
            cut(i.name or "-", None if whole else 24),
            i.status.replace("_", " "),
            i.word,
            short(i.replay_run, 13),
            duration(i.duration_s),
            cut(i.reason or "", None if whole else 60),
        ]
        for i in rep.items
    ]
    seed_note = f", seed {rep.seed}" if rep.seed is not None else ""
    fitted = fit_table(DRILL_FIT, rows, width)
    lines = [
        *fitted.lines,
        *(left_out(fitted.dropped, width, "`drill --wide` shows them") if width else []),
        *wrap_line(
            f"drill #{rep.drill_id}: {sum(i.status == 'reproduced' for i in rep.items)} of"
            f" {len(rep.items)} reproduced (pick {rep.pick}{seed_note}, {rep.candidates}"
            f" candidate run(s)) => {rep.outcome}"
            + (" (stopped before it finished: not counted)" if rep.cancelled else ""),
            width,
        ),
    ]
    if rep.ledger_head:
        lines += wrap_line(f"ledger head {rep.ledger_head} (keep it: verify-store --anchor)", width)
    return "\n".join(lines)
