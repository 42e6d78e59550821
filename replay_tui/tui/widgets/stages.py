"""The stages of a replay and where each one stands."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text

from replay_tui.tui.widgets.style import Palette, safe

STAGES = ("plan", "checkout", "verify", "pull", "run", "hash", "compare")
STAGE_LABELS = {
    "plan": "plan",
    "checkout": "checkout",
    "verify": "verify data",
    "pull": "pull image",
    "run": "run",
    "hash": "hash outputs",
    "compare": "compare",
}
ICONS = {"pending": "·", "running": "▶", "done": "✓", "failed": "✗", "cancelled": "■"}


@dataclass
class StageBoard:
    """Stage states fed by replay events (``start`` / ``done`` / ``failed`` / ``note``)."""

    states: dict[str, str] = field(default_factory=lambda: dict.fromkeys(STAGES, "pending"))
    messages: dict[str, str] = field(default_factory=lambda: dict.fromkeys(STAGES, ""))

    def reset(self) -> None:
        self.states = dict.fromkeys(STAGES, "pending")
        self.messages = dict.fromkeys(STAGES, "")

    @property
    def current(self) -> str | None:
        return next((s for s in STAGES if self.states[s] == "running"), None)

    def apply(self, stage: str, state: str, message: str) -> None:
        if stage not in self.states:
            if state == "failed":
                self.fail(message)
            return
        if state == "start":
            self.states[stage] = "running"
            self.messages[stage] = message
        elif state == "done":
            self.states[stage] = "done"
            self.messages[stage] = message or self.messages[stage]
        elif state == "failed":
            self.states[stage] = "failed"
            self.messages[stage] = message
        elif state == "note":
            self.messages[stage] = message

    def fail(self, message: str, state: str = "failed") -> None:
        """Mark the running stage (or the first pending one) as failed or cancelled."""
        stage = self.current or next((s for s in STAGES if self.states[s] == "pending"), None)
        if stage is not None:
            self.states[stage] = state
            self.messages[stage] = message

    def render(self, palette: Palette, *, width: int = 80) -> Table:
        styles = {
            "pending": palette.muted,
            "running": palette.fg("primary", bold=True),
            "done": palette.fg("success", bold=True),
            "failed": palette.fg("error", bold=True),
            "cancelled": palette.fg("warning", bold=True),
        }
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column(width=1, no_wrap=True)
        table.add_column(width=12, no_wrap=True)
        table.add_column(ratio=1, overflow="fold")  # a long message wraps, never cut
        for stage in STAGES:
            state = self.states[stage]
            style = styles.get(state, palette.muted)
            table.add_row(
                Text(ICONS.get(state, "?"), style=style),
                Text(STAGE_LABELS[stage], style=style if state != "pending" else palette.muted),
                # a stage's message may quote the run's argv or output: escaped
                safe(self.messages[stage], style=palette.muted if state == "done" else ""),
            )
        return table
