"""A manifest, group by group, as key/value tables with the fields that have gaps marked."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from replay_tui.gaps import SEVERITY_ORDER, Gap
from replay_tui.safety import escape_control
from replay_tui.tui.widgets.style import Palette, duration, number, plain, safe
from storage.manifest import RunManifest

SECTIONS = (
    "code",
    "image",
    "data",
    "config",
    "randomness",
    "determinism",
    "environment",
    "hardware",
    "outputs",
)
MAX_CONFIG_ROWS = 60
STRING_LIMIT = 4096
"""A string value is shown whole (its column folds it), up to this bound."""

Row = tuple[str, str, Any]  # (label, field path, value)


def flatten(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Nested config as dotted keys (lists stay whole)."""
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, value


def worst_gap(gaps: Sequence[Gap], path: str) -> Gap | None:
    """The most severe gap about ``path`` or anything under it."""
    hits = [
        g
        for g in gaps
        if g.field == path or g.field.startswith(path + ".") or g.field.startswith(path + "[")
    ]
    return min(hits, key=lambda g: SEVERITY_ORDER[g.severity]) if hits else None


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def section_rows(m: RunManifest, section: str) -> list[Row]:
    """The rows of one manifest group, readable."""
    if section == "code":
        c = m.code
        return [
            ("repo_url", "code.repo_url", c.repo_url),
            ("commit", "code.commit", c.commit),
            ("branch", "code.branch", c.branch),
            ("dirty", "code.dirty", c.dirty),
            ("diff_sha256", "code.diff_sha256", c.diff_sha256),
            ("untracked", "code.untracked", ", ".join(c.untracked) or "none"),
            ("workdir", "workdir", m.workdir),
            ("command", "argv", " ".join(m.argv) or None),
        ]
    if section == "image":
        img = m.image
        return [
            ("reference", "image.reference", img.reference if img else None),
            ("digest", "image.digest", img.digest if img else None),
            ("image_id", "image.image_id", img.image_id if img else None),
            ("platform", "image.platform", img.platform if img else None),
        ]
    if section == "data":
        rows: list[Row] = []
        for i, d in enumerate(m.data):
            rows.append((d.name, f"data[{i}]", d.path))
            rows.append(("  sha256", f"data[{i}].sha256", d.sha256))
            files = "-" if d.file_count is None else str(d.file_count)
            detail = f"{human_size(d.size_bytes)}, {files} files"
            if d.version:
                detail += f", {d.version}"
            rows.append(("  size", f"data[{i}].size_bytes", detail))
        return rows
    if section == "config":
        flat = list(flatten(m.config))
        rows = [("config_hash", "config_hash", m.config_hash)]
        rows += [(k, f"config.{k}", v) for k, v in flat[:MAX_CONFIG_ROWS]]
        if len(flat) > MAX_CONFIG_ROWS:
            rows.append(("…", "config", f"{len(flat) - MAX_CONFIG_ROWS} more"))
        return rows
    if section == "randomness":
        return [(k, f"randomness.{k}", v) for k, v in m.randomness.model_dump().items()]
    if section == "determinism":
        return [(k, f"determinism.{k}", v) for k, v in m.determinism.model_dump().items()]
    if section == "environment":
        env = m.environment
        rows = []
        for k, v in env.model_dump().items():
            if k == "packages":
                v = None if env.packages is None else f"{len(env.packages)} pinned packages"
            rows.append((k, f"environment.{k}", v))
        rows += [(f"${k}", f"env.{k}", v) for k, v in sorted(m.env.items())]
        return rows
    if section == "hardware":
        hw = m.hardware
        gpus = None
        if hw.gpus:
            first = hw.gpus[0]
            extra = ", ".join(
                p
                for p in (
                    f"{first.memory_mb} MB" if first.memory_mb else "",
                    f"cc {first.compute_capability}" if first.compute_capability else "",
                )
                if p
            )
            gpus = f"{len(hw.gpus)} × {first.name}" + (f" ({extra})" if extra else "")
        elif hw.gpus is not None:
            gpus = "none"
        return [
            ("cpu_model", "hardware.cpu_model", hw.cpu_model),
            ("cpu_count", "hardware.cpu_count", hw.cpu_count),
            ("gpus", "hardware.gpus", gpus),
            ("gpu_count", "hardware.gpu_count", hw.gpu_count),
            ("driver_version", "hardware.driver_version", hw.driver_version),
            ("interconnect", "hardware.interconnect", hw.interconnect),
        ]
    if section == "outputs":
        o = m.outputs
        return [
            ("artifacts", "outputs.artifacts", f"{len(o.artifacts)} (see Outputs)"),
            ("metrics", "outputs.metrics", ", ".join(sorted(o.metrics)) or None),
            ("histories", "outputs.metric_history", ", ".join(sorted(o.metric_history)) or None),
            ("log_sha256", "outputs.log_sha256", o.log_sha256),
            ("status", "status", f"{m.status} (exit {m.exit_code})"),
            ("duration", "duration_s", duration(m.duration_s)),
        ]
    raise ValueError(f"no section {section!r}")


def section_table(
    rows: Sequence[Row], gaps: Sequence[Gap], palette: Palette, *, wide: bool = False
) -> Table:
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(no_wrap=True, max_width=28)
    table.add_column(ratio=1, overflow="fold")
    limit = 160 if wide else 90
    for label, path, value in rows:
        gap = worst_gap(gaps, path)
        # a label may be a config key, a data name or an env name: from the manifest
        key = safe(label, style=palette.muted)
        if gap is not None:
            key = safe(f"● {label}", style=palette.severity(gap.severity))
        if value is None:
            shown = Text("unknown", style=palette.muted)
        elif (
            isinstance(value, str)
            and len(value) == 64
            and all(c in "0123456789abcdef" for c in value)
        ):
            shown = Text(value)  # whole: the column folds it (hex digits only)
        elif isinstance(value, float | int) and not isinstance(value, bool):
            shown = Text(number(value))
        elif isinstance(value, str):
            shown = Text(plain(value, STRING_LIMIT))  # folded by the column: whole
        else:
            shown = Text(plain(value, limit))
        if gap is not None:
            shown.append(f"  {escape_control(gap.code)}", style=palette.severity(gap.severity))
        table.add_row(key, shown)
    if not rows:
        table.add_row(Text("(none recorded)", style=palette.muted), Text(""))
    return table


def gaps_renderable(gaps: Sequence[Gap], palette: Palette) -> Table:
    """Every gap: severity badge, code and field, message, remediation."""
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(no_wrap=True, width=10)
    table.add_column(ratio=1)
    if not gaps:
        table.add_row(Text(" none ", style=palette.badge("success")), Text("no provenance gaps"))
        return table
    for g in gaps:
        colour = {"critical": "error", "warning": "warning"}.get(g.severity, "primary")
        body = Text()  # a gap's words quote the manifest's values: escaped
        body.append(escape_control(g.code), style="bold")
        body.append(f"  {escape_control(g.field)}\n", style=palette.muted)
        body.append(escape_control(g.message) + "\n")
        body.append("fix: ", style=palette.fg("success", bold=True))
        body.append(escape_control(g.remediation))
        table.add_row(Text(f" {g.severity.upper():<8} ", style=palette.badge(colour)), body)
        table.add_row("", "")
    return table
