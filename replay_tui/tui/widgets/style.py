"""Theme-derived Rich styles and the small formatters every screen shares.

Cells of a DataTable are Rich ``Text``, which cannot name a CSS variable, so the
colours are read from the running theme here, in one place, and follow it.

Text from outside (a manifest, the store's facts, a run's log, a container's output)
reaches a widget only through :func:`safe` (or a formatter here, each of which escapes):
a Rich ``Text`` of the string with its control characters shown as escapes
(``replay_tui.safety.escape_control``), never a string a widget would read as markup.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style, StyleType
from rich.text import Text
from textual.app import App
from textual.color import Color

from replay_tui.safety import escape_control
from replay_tui.textfmt import cut as cut
from replay_tui.textfmt import duration as duration
from replay_tui.textfmt import short as short

VERDICT_COLOUR = {
    "IDENTICAL": "success",
    "EQUIVALENT": "primary",
    "WITHIN_NOISE": "accent",
    "DIVERGED": "error",
    "INCOMPLETE": "warning",
    "CANCELLED": "secondary",
    "INTERRUPTED": "secondary",
    "TIMED OUT": "secondary",
    "INFRA-ERROR": "secondary",
}
SEVERITY_COLOUR = {"critical": "error", "warning": "warning", "info": "primary"}
STATUS_COLOUR = {
    "succeeded": "success",
    "completed": "success",
    "cancelled": "warning",
    "infra-error": "error",
    "failed": "error",
    "interrupted": "warning",
    "timed_out": "warning",
    "error": "error",
}


class Palette:
    """Rich styles taken from the app's current theme (one per app and theme, memoised)."""

    _cache: ClassVar[dict[tuple[int, str], Palette]] = {}

    def __init__(self, variables: dict[str, str]) -> None:
        self.variables = variables
        self._styles: dict[tuple[str, str, bool], Style] = {}

    @classmethod
    def of(cls, app: App[Any]) -> Palette:
        key = (id(app), app.theme)
        palette = cls._cache.get(key)
        if palette is None:
            if len(cls._cache) > 16:
                cls._cache.clear()
            variables = app.theme_variables or app.get_css_variables()
            palette = cls._cache[key] = cls(dict(variables))
        return palette

    def _colour(self, name: str, fallback: str = "#808080") -> Color:
        try:
            return Color.parse(self.variables.get(name, fallback))
        except Exception:
            return Color.parse(fallback)

    def fg(self, name: str, *, bold: bool = False) -> Style:
        """Text in a theme colour (``success``, ``error``, ``warning``, ``primary`` ...)."""
        style = self._styles.get(("fg", name, bold))
        if style is None:
            key = f"text-{name}" if f"text-{name}" in self.variables else name
            style = Style(color=self._colour(key).rich_color, bold=bold)
            self._styles[("fg", name, bold)] = style
        return style

    def badge(self, name: str) -> Style:
        """Bold text on a theme colour."""
        style = self._styles.get(("badge", name, True))
        if style is None:
            back = self._colour(name)
            style = Style(
                color=back.get_contrast_text().rich_color, bgcolor=back.rich_color, bold=True
            )
            self._styles[("badge", name, True)] = style
        return style

    @property
    def muted(self) -> Style:
        style = self._styles.get(("muted", "", False))
        if style is None:
            fore = self._colour("foreground", "#e0e0e0")
            back = self._colour("background", "#121212")
            style = self._styles[("muted", "", False)] = Style(
                color=fore.blend(back, 0.45).rich_color
            )
        return style

    def verdict(self, verdict: str | None, *, width: int = 0) -> Text:
        """A verdict as a coloured badge; ``-`` when there is none."""
        if not verdict:
            return Text("-".ljust(width), style=self.muted)
        colour = VERDICT_COLOUR.get(verdict.upper(), "warning")
        return safe(f" {verdict} ".ljust(width), style=self.badge(colour))

    def status(self, status: str | None) -> Text:
        if not status:
            return Text("-", style=self.muted)
        return safe(status, style=self.fg(STATUS_COLOUR.get(status, "warning")))

    def severity(self, severity: str) -> Style:
        return self.fg(SEVERITY_COLOUR.get(severity, "primary"), bold=severity == "critical")

    def gap_counts(self, critical: int | None, warning: int | None, info: int | None) -> Text:
        """``2c 3w 1i``, each part in its severity colour; ``-`` if never evaluated."""
        if critical is None:
            return Text("-", style=self.muted)
        out = Text()
        for n, sev, letter in ((critical, "critical", "c"), (warning, "warning", "w")):
            style = self.severity(sev) if n else self.muted
            out.append(f"{n}{letter}", style=style)
            out.append(" ")
        out.append(f"{info or 0}i", style=self.fg("primary") if info else self.muted)
        return out

    def mark(self, ok: bool | None, *, yes: str = "✓", no: str = "✗", unknown: str = "?") -> Text:
        if ok is None:
            return Text(unknown, style=self.fg("warning", bold=True))
        return (
            Text(yes, style=self.fg("success", bold=True))
            if ok
            else Text(no, style=self.fg("error", bold=True))
        )


STATE_MARK = {
    "identical": "✓",
    "within_tolerance": "✓",
    "within_noise": "≈",
    "outside_noise": "✗",
    "outside_tolerance": "✗",
    "missing": "?",
    "volatile": "~",
    "not_judged": "·",
}
"""A judged item's mark by its state (``compare.states``): within noise is its own mark."""
STATE_COLOUR = {
    "identical": "success",
    "within_tolerance": "success",
    "within_noise": VERDICT_COLOUR["WITHIN_NOISE"],
    "outside_noise": "error",
    "outside_tolerance": "error",
    "missing": "warning",
}
"""The colour of a state: within noise in the colour of the verdict WITHIN_NOISE (a
reproduced colour), never the error's."""


def state_mark(palette: Palette, state: str | None) -> Text:
    """The mark of an item's state in its colour (muted for one not judged)."""
    if state is None:
        return Text("?", style=palette.fg("warning", bold=True))
    colour = STATE_COLOUR.get(state)
    style = palette.fg(colour, bold=True) if colour else palette.muted
    return Text(STATE_MARK.get(state, "?"), style=style)


def state_style(palette: Palette, state: str | None) -> Style | str:
    """How a cell of an item in ``state`` is coloured: only a failure in the error's."""
    if state in ("outside_noise", "outside_tolerance"):
        return palette.fg("error")
    if state == "missing":
        return palette.fg("warning")
    return ""


def safe(value: object, style: StyleType = "", **kwargs: Any) -> Text:
    """``value`` from outside as a Rich ``Text``: its control characters (ESC, C1, bidi
    overrides) shown as visible escapes, its brackets as they are (a ``Text`` is never
    read as markup).  ``kwargs``: as ``Text`` takes them (``no_wrap``, ``overflow``...)."""
    return Text(escape_control(str(value)), style=style, **kwargs)


def when(timestamp: str | None) -> str:
    """``2025-03-01 08:00:12`` from an RFC 3339 timestamp (absolute: snapshots stay stable)."""
    if not timestamp:
        return "-"
    return escape_control(timestamp[:19].replace("T", " "))


def number(value: Any) -> str:
    """A metric value, compactly; strings (``inf``, ``nan``) as they are."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return escape_control(str(value))


def plain(value: Any, limit: int = 120) -> str:
    """Any manifest value as one short line."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        if not value:
            return "[]"
        text = ", ".join(plain(v, limit) for v in value)
        if len(text) > limit:
            return f"{len(value)} items"
        return text
    if isinstance(value, dict):
        if not value:
            return "{}"
        text = ", ".join(f"{escape_control(str(k))}={plain(v, limit)}" for k, v in value.items())
        return text if len(text) <= limit else f"{len(value)} entries"
    return cut(str(value).replace("\n", " ⏎ "), limit)


def fit(text: Text | str, width: int) -> Text:
    """``text`` in at most ``width`` cells, its styles kept; a cut one ends in ``…``
    (``cut`` for a Rich Text: a table column of fixed width never cuts silently).  A
    string is escaped (:func:`safe`); a ``Text`` was made safe by whoever made it."""
    out = safe(text) if isinstance(text, str) else text.copy()
    if out.cell_len > width:
        out.truncate(max(1, width), overflow="ellipsis")
    return out


def choices(options: list[tuple[str, str]]) -> list[tuple[Text, str]]:
    """Select options whose prompt, shown in a Select narrower than it, ends in ``…``
    (the open list shows each whole)."""
    return [(Text(label, no_wrap=True, overflow="ellipsis", end=""), v) for label, v in options]
