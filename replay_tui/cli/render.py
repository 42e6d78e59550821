"""The CLI's text for runs, manifests, gaps and drills (comparisons:
``replay_tui.compare.render``; shared formatters: ``replay_tui.textfmt``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from replay_tui.compare.gaps import Gap, gap_lines
from replay_tui.safety import escape_control
from replay_tui.textfmt import cut, duration, short, table
from replay_tui.verdicts import Reproduction, drill_item_word, outcome_word
from storage.manifest import RunManifest
from storage.records import ReplayFact, RunRecord

if TYPE_CHECKING:
    from replay_tui.replay.drill import DrillReport

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
) -> str:
    if not records:
        if filtered:
            return "no run matches (the search and filters given); `replay-tui runs` lists all"
        return "no runs (record one with `replay-tui record -- CMD` or `replay-tui ingest FILE`)"
    return table(RUN_COLUMNS_ALL, run_rows(records, reproduction, wide=wide, aborted=aborted))


def gaps_text(gaps: Sequence[Gap]) -> str:
    if not gaps:
        return "no provenance gaps"
    return "\n".join(gap_lines(gaps))


def _kv(title: str, pairs: Sequence[tuple[str, Any]]) -> list[str]:
    out = [f"── {title}"]
    for k, v in pairs:
        if isinstance(v, list | dict):
            v = json.dumps(v) if len(json.dumps(v)) < 90 else f"{len(v)} entries"
        out.append(f"  {k:<26} {'-' if v is None else v}")
    return out


def manifest_text(
    rec: RunRecord,
    m: RunManifest,
    gaps: Sequence[Gap],
    replays: Sequence[ReplayFact],
    bisects: Sequence[Mapping[str, Any]] = (),
) -> str:
    img = m.image
    lines = [
        f"run {m.run_id}  {m.name or ''}".rstrip(),
        f"  {m.kind}, {m.status} (exit {m.exit_code}), started {m.started_at},"
        f" {duration(m.duration_s)}" + (f", replay of {m.replay_of}" if m.replay_of else ""),
        f"  manifest sha256 {m.integrity.manifest_sha256}",
        f"  command: {' '.join(m.argv) or '-'}   (workdir {m.workdir})",
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
        hw["gpus"] = ", ".join(g["name"] for g in hw["gpus"])
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
    lines += ["  " + ln for ln in gaps_text(gaps).splitlines()]
    lines.append("── replays")
    if not replays:
        lines.append("  (none yet: `replay-tui replay RUN`)")
    for i, r in enumerate(replays, 1):  # numbered per run, oldest first
        lines.append(
            f"  {i:>2}. {r.created_at[:19]} {r.backend or '-':<6} {r.status:<11}"
            f" {outcome_word(r.status, r.verdict):<11} {r.replay_run or ''}"
            f" {r.reason or ''}".rstrip()
        )
    lines += bisect_lines(rec.id, bisects)
    lines.append(f"── signed evidence bundle: {'yes' if rec.signed else 'no'}")
    return escape_control("\n".join(lines), keep_newlines=True)  # manifest strings: untrusted


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


def bisect_lines(run_id: str, bisects: Sequence[Mapping[str, Any]]) -> list[str]:
    """``show``'s bisects section: each bisect the run took part in, oldest first."""
    lines = ["── bisects"]
    if not bisects:
        lines.append("  (none: `replay-tui bisect GOOD BAD`)")
    for i, fact in enumerate(bisects, 1):
        b = bisect_summary(run_id, fact)
        other = b["bad_run"] if b["role"] == "GOOD" else b["good_run"]
        found = "CAUSE FOUND" if b["outcome"] == "cause" else "UNEXPLAINED"
        lines.append(
            f"  {i:>2}. #{b['id']} {str(b['created_at'])[:19]} {b['role']:<4} vs {other}"
            f"  {found} after {b['probes_run']} probe(s)"
        )
        if b["verdict"]:
            lines.append(f"      {b['verdict']}")
    return lines


def drill_table(rep: DrillReport) -> str:
    """A drill's runs, one row each, and its one-line outcome."""
    rows = [
        [
            short(i.run_id, 13),
            cut(i.name or "-", 24),
            i.status.replace("_", " "),
            drill_item_word(i.status, i.verdict, i.reason),
            short(i.replay_run, 13),
            duration(i.duration_s),
            cut(i.reason or "", 60),
        ]
        for i in rep.items
    ]
    seed_note = f", seed {rep.seed}" if rep.seed is not None else ""
    lines = [
        table(["RUN", "NAME", "RESULT", "VERDICT", "REPLAY", "TIME", "REASON"], rows),
        f"drill #{rep.drill_id}: {sum(i.status == 'reproduced' for i in rep.items)} of"
        f" {len(rep.items)} reproduced (pick {rep.pick}{seed_note}, {rep.candidates}"
        f" candidate run(s)) => {rep.outcome}"
        + (" (stopped before it finished: not counted)" if rep.cancelled else ""),
    ]
    if rep.ledger_head:
        lines.append(f"ledger head {rep.ledger_head} (keep it: verify-store --anchor)")
    return "\n".join(lines)
