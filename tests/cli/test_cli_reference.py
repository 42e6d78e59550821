"""docs/cli.md is the commands' own ``--help``: a changed flag or help text without the
page regenerated fails here, naming the one command that regenerates it."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from replay_tui.cli import main, reference
from tests.conftest import REPO_ROOT, subprocess_env


def test_docs_cli_md_is_the_generated_reference() -> None:
    page = REPO_ROOT / "docs" / "cli.md"
    assert page.resolve() == reference.PAGE.resolve()
    current = page.read_text(encoding="utf-8") if page.is_file() else ""
    generated = reference.generate()
    if current != generated:
        diff = "\n".join(
            list(
                difflib.unified_diff(
                    current.splitlines(),
                    generated.splitlines(),
                    "docs/cli.md",
                    "generated",
                    lineterm="",
                )
            )[:60]
        )
        raise AssertionError(
            f"docs/cli.md differs from the commands' --help; regenerate it with\n"
            f"    {reference.REGENERATE}\n{diff}"
        )


def test_every_command_is_on_the_page_with_the_help_it_prints() -> None:
    """The generator walks the whole tree, and each section is what ``--help`` prints."""
    text = reference.generate()
    root = reference.context(main, reference.PROGRAM, None)
    seen = [ctx.command_path for ctx, _ in reference.walk(main, root)]
    assert "replay-tui import mlflow" in seen and "replay-tui import wandb" in seen
    for name in main.list_commands(root):
        assert f"replay-tui {name}" in seen, name
    runner = CliRunner()
    for path in (["replay"], ["import", "wandb"], []):
        result = runner.invoke(main, [*path, "--help"], prog_name="replay-tui", terminal_width=78)
        assert result.exit_code == 0, result.output
        printed = "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")
        heading = " ".join(["## replay-tui", *path])
        section = text.split(f"\n{heading}\n", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
        assert section == printed, path


def test_a_changed_help_text_is_caught() -> None:
    """The check can fail: an option's new help makes the page differ."""
    before = reference.generate()
    cmd = main.get_command(reference.context(main, reference.PROGRAM, None), "gaps")
    assert isinstance(cmd, click.Command)
    cmd.params.append(click.Option(["--brand-new-flag"], is_flag=True, help="Not on the page."))
    try:
        after = reference.generate()
    finally:
        cmd.params.pop()
    assert after != before and "--brand-new-flag" in after


def test_write_mode_writes_the_generated_page(tmp_path: Path) -> None:
    page = tmp_path / "cli.md"
    page.write_text("# an old page\n", encoding="utf-8")
    assert reference.run(["--write"], page=page) == 0
    assert page.read_text(encoding="utf-8") == reference.generate()


def test_the_module_runs_as_the_page_says() -> None:
    """``python -m replay_tui.cli.reference`` prints the page (the command the page and
    the failure message name, without ``--write``)."""
    done = subprocess.run(
        [sys.executable, "-m", "replay_tui.cli.reference"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference.generate()
