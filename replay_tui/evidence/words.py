"""What an export and a verify say, line by line: the one wording both faces print (the
CLI's ``export`` and ``verify``, the TUI's export form and verify dialog), apart from the
engines that write and check a bundle, so that a face reads these words without reaching
past the use cases (``replay_tui.ops``) into the engines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from replay_tui.safety import escape_control

if TYPE_CHECKING:
    from replay_tui.evidence.export import ExportResult
    from replay_tui.evidence.verify import BundleCheck


@dataclass(frozen=True)
class ReportLine:
    text: str
    alarm: bool = False  # shown in red: the bundle was checked with its own key


MAX_PROBLEM_LINES = 20


def _no_verdict(chk: BundleCheck) -> str:
    if chk.replays:
        return f"none ({chk.replays} replay(s), none completed with a verdict)"
    return "none (not replayed)"


def report_lines(chk: BundleCheck) -> list[ReportLine]:
    """What ``replay-tui verify`` prints (and the TUI shows), line by line: intact or
    the first problem, the other problems, the exporting store's ledger head, notes."""
    run_id = escape_control(chk.run_id) if chk.run_id else chk.run_id
    verdict = escape_control(chk.verdict) if chk.verdict else chk.verdict
    lines: list[ReportLine] = []
    if chk.ok:
        who = f", signed by key {chk.key_id}" if chk.signed and chk.key_id else ""
        lines.append(
            ReportLine(
                f"bundle intact: {chk.files_checked} files match{who}"
                + (f"; run {run_id}, verdict {verdict or _no_verdict(chk)}" if run_id else "")
            )
        )
    else:
        lines.append(ReportLine(f"BUNDLE FAILED VERIFICATION: {chk.problems[0].text()}"))
        lines.extend(ReportLine(f"  also: {p.text()}") for p in chk.problems[1:MAX_PROBLEM_LINES])
    if chk.ledger_head:
        lines.append(ReportLine(f"  exported from a store whose ledger head was {chk.ledger_head}"))
    lines.extend(ReportLine(f"  statement: {st.text()}") for st in chk.statements)
    for note in chk.notes:
        red = chk.embedded_fingerprint is not None and chk.embedded_fingerprint in note
        lines.append(ReportLine(f"  note: {note}", alarm=red))
    return lines


def public_half(private: Path) -> Path:
    """Where ``keygen`` writes the public key of ``private``: ``KEY.key`` gives
    ``KEY.pub``, any other name ``NAME.pub``."""
    if private.suffix == ".key":
        return private.with_suffix(".pub")
    return private.with_name(private.name + ".pub")


SIGN_ADVICE = "(pass --sign KEY to sign it)"
"""What :func:`describe_export` says of an unsigned bundle (a face with no flags says
how it takes a key instead)."""


def describe_export(res: ExportResult, key_path: Path | None) -> list[str]:
    """What ``replay-tui export`` says of a bundle it wrote, line by line: where, how many
    files, the verdict, the ledger head, the signature and how to check it.  The TUI's
    export says the same (``key_path``: the private key it was signed with, if any)."""
    listed = res.files - 2  # SHA256SUMS and the statement are the other two
    lines = [
        f"exported run {res.run_id} to {res.path} ({res.files} files: the {listed} that"
        " SHA256SUMS lists, SHA256SUMS and the statement)",
        f"  verdict: {res.verdict_text or res.verdict or 'not replayed'}",
    ]
    if res.ledger_head:
        lines.append(f"  store ledger head: {res.ledger_head} (verify-store --anchor takes it)")
    if res.signed:  # keygen writes the public half beside the private key
        lines.append(f"  signed with key {res.key_id}")
        pub = public_half(key_path) if key_path is not None else None
        check = f" --key {pub if pub is not None and pub.is_file() else 'KEY.pub'}"
    else:
        lines.append(f"  not signed {SIGN_ADVICE}")
        check = " --allow-unsigned"
    lines.append(f"  check it with: replay-tui verify {res.path}{check}")
    return lines
