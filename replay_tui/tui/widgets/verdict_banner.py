"""The verdict, large: block letters three rows high, on the verdict's theme colour."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from replay_tui.safety import escape_control

# 5-pixel-high glyphs ('#' on), drawn two pixel rows per terminal row with half blocks.
GLYPHS: dict[str, tuple[str, ...]] = {
    "A": (".#.", "#.#", "###", "#.#", "#.#"),
    "C": (".##", "#..", "#..", "#..", ".##"),
    "D": ("##.", "#.#", "#.#", "#.#", "##."),
    "E": ("###", "#..", "##.", "#..", "###"),
    "G": (".##", "#..", "#.#", "#.#", ".##"),
    "H": ("#.#", "#.#", "###", "#.#", "#.#"),
    "I": ("###", ".#.", ".#.", ".#.", "###"),
    "L": ("#..", "#..", "#..", "#..", "###"),
    "M": ("#...#", "##.##", "#.#.#", "#...#", "#...#"),
    "N": ("#..#", "##.#", "#.##", "#..#", "#..#"),
    "O": (".#.", "#.#", "#.#", "#.#", ".#."),
    "P": ("##.", "#.#", "##.", "#..", "#.."),
    "Q": (".##.", "#..#", "#..#", "#.#.", ".#.#"),
    "R": ("##.", "#.#", "##.", "#.#", "#.#"),
    "S": (".##", "#..", ".#.", "..#", "##."),
    "T": ("###", ".#.", ".#.", ".#.", ".#."),
    "U": ("#.#", "#.#", "#.#", "#.#", "###"),
    "V": ("#.#", "#.#", "#.#", "#.#", ".#."),
    "W": ("#...#", "#...#", "#.#.#", "##.##", "#...#"),
    "Y": ("#.#", "#.#", ".#.", ".#.", ".#."),
    "-": ("...", "...", "###", "...", "..."),
    " ": ("..", "..", "..", "..", ".."),
}
_HALF = {(False, False): " ", (True, False): "▀", (False, True): "▄", (True, True): "█"}


def block_letters(word: str) -> list[str]:
    """Three lines of half-block letters; unknown characters are skipped."""
    glyphs = [GLYPHS[c] for c in word.upper().replace("_", " ") if c in GLYPHS]
    rows = [".".join(g[r] for g in glyphs) for r in range(5)] + [""]
    width = len(rows[0])
    rows[5] = "." * width
    out = []
    for top, bottom in ((rows[0], rows[1]), (rows[2], rows[3]), (rows[4], rows[5])):
        out.append("".join(_HALF[(t == "#", b == "#")] for t, b in zip(top, bottom, strict=True)))
    return out


class VerdictBanner(Static):
    """A verdict in block letters with a line of context under it."""

    DEFAULT_CSS = """
    VerdictBanner {
        height: auto;
        padding: 0 2;
        text-align: center;
        background: $panel;
        color: $text;
    }
    VerdictBanner.-identical { background: $success-muted; color: $text-success; }
    VerdictBanner.-equivalent { background: $primary-muted; color: $text-primary; }
    VerdictBanner.-within_noise { background: $accent-muted; color: $text-accent; }
    VerdictBanner.-diverged { background: $error-muted; color: $text-error; }
    VerdictBanner.-incomplete { background: $warning-muted; color: $text-warning; }
    """

    def show(
        self, verdict: str | None, subtitle: str = "", *, compact: bool = False, tiny: bool = False
    ) -> None:
        """``compact``: the word in one line; ``tiny`` (a short screen): the word and each
        subtitle line cut to one row, never wrapped."""
        word = (verdict or "…").upper()
        for v in ("identical", "equivalent", "within_noise", "diverged", "incomplete"):
            self.set_class(word.lower() == v, f"-{v}")
        text = Text(justify="center", no_wrap=tiny, overflow="ellipsis")
        if compact or tiny or not all(c in GLYPHS for c in word.replace("_", " ")):
            text.append(f"━━ {escape_control(word)} ━━", style="bold")
        else:
            text.append("\n".join(block_letters(word)), style="bold")
        if subtitle:  # a stored comparison's words: escaped (its lines kept)
            text.append("\n" + escape_control(subtitle, keep_newlines=True))
        self.update(text)
