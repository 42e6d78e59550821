"""The command-line reference page, ``docs/cli.md``, generated from ``--help``.

Walks the click tree from the root group (every command and every subcommand of a
group, hidden ones left out) and writes each one's help text as it prints at 80
columns, so the page says what the commands say and nothing else.  A test
(``tests/cli/test_cli_reference.py``) fails when the page and the commands differ.

Regenerate the page::

    .venv/bin/python -m replay_tui.cli.reference --write

Without ``--write`` the page is printed.  This module reads no file: the test compares
the page with :func:`generate`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

PROGRAM = "replay-tui"
WIDTH = 80
"""The terminal width the help is formatted for: click's own cap, so the page reads as
``--help`` does in any terminal 80 columns wide or wider."""

PAGE = Path(__file__).parents[2] / "docs" / "cli.md"
"""Where the page lives in the repository."""

REGENERATE = ".venv/bin/python -m replay_tui.cli.reference --write"
"""The one command that rewrites ``docs/cli.md``."""

HEADER = f"""\
# Command-line reference

Every `{PROGRAM}` command's `--help`, as it prints at {WIDTH} columns. This page is
generated from the commands themselves; do not edit it by hand. After changing a
command, an option or a help text, regenerate it:

```sh
{REGENERATE}
```

`tests/cli/test_cli_reference.py` fails while this page and the commands differ.
Exit codes, the store's location and `--json` are described in the
[README](../README.md#exit-codes).
"""


def walk(
    command: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Context, click.Command]]:
    """Each command under ``command`` (itself first), depth first, by name."""
    yield ctx, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from walk(sub, context(sub, name, ctx))


def context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    """The context ``command`` gets when run as ``name`` (its own settings, its parent's
    help options), made without running anything or checking its arguments."""
    extra = {} if parent is not None else {"terminal_width": WIDTH - 2}  # click's margin
    return command.make_context(name, [], parent=parent, resilient_parsing=True, **extra)


def help_text(ctx: click.Context, command: click.Command) -> str:
    """The help ``command --help`` prints, without trailing spaces."""
    lines = command.get_help(ctx).splitlines()
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def generate() -> str:
    """The whole page's text."""
    from replay_tui.cli import main

    root = context(main, PROGRAM, None)
    parts = [HEADER]
    commands = list(walk(main, root))
    parts.append("## Commands\n")
    for ctx, _ in commands:
        path = ctx.command_path
        parts.append(f"- [`{path}`](#{anchor(path)})")
    parts.append("")
    for ctx, command in commands:
        parts.append(f"## {ctx.command_path}\n")
        parts.append("```text")
        parts.append(help_text(ctx, command))
        parts.append("```\n")
    return "\n".join(parts).rstrip("\n") + "\n"


def anchor(heading: str) -> str:
    """The link target a Markdown renderer makes of ``## heading`` (GitHub's rule for
    these headings: lower case, spaces to hyphens)."""
    return heading.lower().replace(" ", "-")


def run(argv: Sequence[str], page: Path = PAGE) -> int:
    """``--write`` the page, else print it."""
    text = generate()
    if "--write" in argv:
        page.write_text(text, encoding="utf-8")
        print(f"wrote {page}")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
