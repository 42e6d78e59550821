"""A drill as JUnit XML (``drill --junit FILE``), the report CI dashboards read.

One ``<testsuite>`` per drill and one ``<testcase>`` per drilled run: its name is the
run's name and id, its ``classname`` ``replay-tui.drill.<backend>``, its ``time`` the
seconds the run's replay took.  A run that reproduced passes; one that did not carries a
``<failure>`` whose ``type`` is the verdict (or ``NOT_REPLAYABLE`` when the manifest could
not be replayed at all) and whose ``message`` is the reason; a run whose replay was
aborted (cancelled, interrupted, timed out, an infrastructure error) is ``<skipped>`` with
how and why in its ``message``: it was not judged, so it neither passed nor failed.  Every
case's ``<system-out>`` and properties name the verdict, the replay run and the replay
fact.  The suite's properties hold the drill's pick, seed, backend, id and outcome, so
the drill can be repeated and found in the store's ledger.
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from replay_tui.errors import BadInput
from replay_tui.replay.drill import DrillItem, DrillReport
from replay_tui.safety import escape_control
from replay_tui.verdicts import aborted_label

SUITE_NAME = "replay-tui drill"
NOT_REPLAYABLE = "NOT_REPLAYABLE"


def _text(value: object, *, lines: bool = False) -> str:
    """A value as XML text: control characters escaped (XML 1.0 cannot hold most of them);
    ``lines`` keeps newlines and tabs."""
    return escape_control(str(value), keep_newlines=lines)


def _seconds(t: float) -> str:
    return f"{max(t, 0.0):.3f}"


def _props(parent: ET.Element, values: dict[str, object]) -> None:
    props = ET.SubElement(parent, "properties")
    for k, v in values.items():
        if v is not None:
            ET.SubElement(props, "property", name=k, value=_text(v))


def _case(suite: ET.Element, item: DrillItem, backend: str) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        name=_text(f"{item.name} ({item.run_id})" if item.name else item.run_id),
        classname=f"replay-tui.drill.{_text(backend)}",
        time=_seconds(item.duration_s),
    )
    _props(
        case,
        {
            "run_id": item.run_id,
            "status": item.status,
            "verdict": item.word,
            "replay_run": item.replay_run,
            "replay_fact_id": item.replay_fact_id,
        },
    )
    reason = item.reason or ""
    if item.status == "not_reproduced":
        kind = item.verdict or NOT_REPLAYABLE
        fail = ET.SubElement(case, "failure", message=_text(reason or kind), type=_text(kind))
        fail.text = _text(f"{kind}: {reason}" if reason else kind)
    elif item.status == "error":
        how = (aborted_label(item.abort) if item.abort else None) or "ABORTED"
        ET.SubElement(case, "skipped", message=_text(f"{how}: {reason}" if reason else how))
    out = ET.SubElement(case, "system-out")
    out.text = _text(
        f"verdict: {item.word}\nreplay run: {item.replay_run or '-'}\n"
        + (f"reason: {reason}\n" if reason else ""),
        lines=True,
    )


def junit_xml(report: DrillReport) -> bytes:
    """The drill as a JUnit XML document (UTF-8, with its declaration)."""
    items = report.items
    failures = sum(1 for i in items if i.status == "not_reproduced")
    skipped = sum(1 for i in items if i.status == "error")
    total = sum(i.duration_s for i in items)
    attrs = {
        "name": SUITE_NAME,
        "tests": str(len(items)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": _seconds(total),
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(
        root, "testsuite", {**attrs, "timestamp": report.started_at.removesuffix("Z")}
    )
    _props(
        suite,
        {
            "drill_id": report.drill_id,
            "outcome": report.outcome,
            "exit_code": report.exit_code,
            "pick": report.pick,
            "seed": report.seed,
            "since": report.since,
            "backend": report.backend,
            "candidates": report.candidates,
            "ledger_head": report.ledger_head,
            "started_at": report.started_at,
            "ended_at": report.ended_at,
        },
    )
    for item in items:
        _case(suite, item, report.backend)
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data + b"\n"


def junit_target(path: Path) -> Path:
    """``path`` made absolute, refused when a report cannot be written there (checked
    before the drill runs, so a long drill never ends unable to write its report)."""
    path = Path(os.path.abspath(path))
    if path.is_dir():
        raise BadInput(f"--junit {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise BadInput(f"--junit {path}: folder {path.parent} does not exist")
    return path


def write_junit(report: DrillReport, path: Path) -> None:
    """Write the drill's JUnit XML to ``path``, whole or not at all (a temporary file
    beside it, renamed into place)."""
    path = junit_target(path)
    data = junit_xml(report)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
