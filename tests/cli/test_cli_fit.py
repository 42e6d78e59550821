"""The CLI's text fits the terminal (issue #28): every line of ``runs``, ``show``,
``gaps``, ``stats`` and a drill's table within ``$COLUMNS``, values cut with an
ellipsis and columns left out by priority (and said so), the 13-character id prefix
never cut; whole lines to a pipe with no ``$COLUMNS``.  One word for a run with no
verdict; a store error says where the store's path came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay_tui.cli.render import RUN_COLUMNS_ALL, drill_table
from replay_tui.replay.drill import DrillItem, DrillReport
from replay_tui.replay.runner import compare_and_store
from replay_tui.textfmt import Column, fit_table, output_width, wrap_line
from replay_tui.verdicts import NOT_REPLAYED
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.support.bundles import replay_of
from tests.support.inprocess import invoke

LONG_NAME = "a-training-run-with-a-name-far-longer-than-any-column-" + "x" * 30


def replay_tui(
    *args: str, columns: int | None = None, store: Path | None = None, **env: str | None
) -> subprocess.CompletedProcess[str]:
    """``replay-tui ARGS`` in this process (``tests.support.inprocess``), stdout not a
    terminal, ``$COLUMNS`` as given (unset when None)."""
    head = ["--store", str(store)] if store is not None else []
    return invoke([*head, *args], env={"COLUMNS": None if columns is None else str(columns), **env})


@pytest.fixture
def filled(store_path: Path, make_manifest: MakeManifest) -> dict[str, str]:
    """A store with a long-named run, a gappy one and a judged replay."""
    long = make_manifest(index=0, name=LONG_NAME)
    gappy = make_manifest(index=1)
    gappy["randomness"] = {}
    gappy["image"] = None
    rep = replay_of(long, make_manifest(index=2)["run_id"])
    with RunStore(store_path) as s:
        for d in (long, gappy, rep):
            s.ingest(manifest_from_data(d))
        compare_and_store(s, s.manifest(long["run_id"]), s.manifest(rep["run_id"]))
    return {"long": long["run_id"], "gappy": gappy["run_id"], "replay": rep["run_id"]}


def _fits(text: str, columns: int) -> None:
    too_long = [ln for ln in text.splitlines() if len(ln) > columns]
    assert not too_long, f"{len(too_long)} lines over {columns}: {too_long[:3]}"


@pytest.mark.parametrize("columns", [80, 200])
def test_every_command_fits_columns(columns: int, store_path: Path, filled: dict[str, str]) -> None:
    for args in (
        ["runs"],
        ["show", filled["long"]],
        ["show", filled["gappy"]],
        ["gaps", filled["gappy"]],
        ["stats"],
    ):
        r = replay_tui(*args, columns=columns, store=store_path)
        assert r.returncode == 0, (args, r.stderr)
        _fits(r.stdout, columns)
    runs = replay_tui("runs", columns=columns, store=store_path).stdout
    for rid in filled.values():
        assert rid[:13] in runs  # the id prefix `show` and `replay` take is never cut
    assert "NAME" in runs and "VERDICT" in runs and "IDENTICAL" in runs
    if columns == 80:
        assert LONG_NAME[:8] in runs and LONG_NAME[:27] not in runs and "…" in runs
        assert "IMAGE" not in runs.splitlines()[0]  # left out, and said so:
        assert "left out to fit 80 columns; --wide shows them" in runs
    else:
        assert "IMAGE" in runs.splitlines()[0] and "left out" not in runs


def test_a_pipe_without_columns_gets_whole_lines(store_path: Path, filled: dict[str, str]) -> None:
    runs = replay_tui("runs", store=store_path).stdout
    header = runs.splitlines()[0].split()
    assert tuple(header) == RUN_COLUMNS_ALL
    assert LONG_NAME[:27] + "…" in runs  # the usual 28-cell cut, no more
    gaps = replay_tui("gaps", filled["gappy"], store=store_path).stdout
    assert any(len(ln) > 80 for ln in gaps.splitlines())  # prose kept on one line
    shown = replay_tui("show", filled["gappy"], store=store_path).stdout
    assert "cut to fit" not in shown


def test_show_wide_and_runs_wide_are_whole_at_any_width(
    store_path: Path, filled: dict[str, str]
) -> None:
    narrow = replay_tui("show", filled["long"], columns=80, store=store_path).stdout
    assert "(… ends a value cut to fit 80 columns; `show --wide` shows it whole)" in narrow
    wide = replay_tui("show", filled["long"], "--wide", columns=80, store=store_path).stdout
    with RunStore(store_path) as s:
        digest = s.manifest(filled["long"]).integrity.manifest_sha256
    assert f"manifest sha256 {digest}" in wide and "cut to fit" not in wide
    assert f"manifest sha256 {digest}" not in narrow
    assert LONG_NAME in replay_tui("runs", "--wide", columns=80, store=store_path).stdout


def test_the_replays_in_show_keep_their_numbers_and_outcome_when_narrow(
    store_path: Path, filled: dict[str, str]
) -> None:
    from replay_tui.cli.render import replay_lines
    from storage.records import ReplayFact

    fact = ReplayFact(
        id=1,
        original_run=filled["long"],
        replay_run=filled["replay"],
        backend="docker",
        status="cancelled",
        verdict=None,
        reason="stopped by the user before the second epoch finished, on purpose",
        created_at="2025-03-01T08:07:08.123Z",
        duration_s=12.0,
        comparison_id=None,
    )
    whole = replay_lines([fact])
    assert filled["replay"] in whole[0] and "CANCELLED" in whole[0]
    for width in (40, 60, 80):
        (line,) = replay_lines([fact], width)
        assert len(line) <= width, line
        assert line.split()[0] == "1." and "CANCELLED" in line
        assert filled["replay"][:13] in line


def _drill() -> DrillReport:
    items = [
        DrillItem(
            run_id=f"01JN8BXBR5SNGXHWBAVY8VEP{i:02d}",
            name=LONG_NAME,
            status="not_reproduced" if i else "reproduced",
            verdict="DIVERGED" if i else "IDENTICAL",
            replay_run=f"01JN8EAMT6CM9XXXXXXXXXXX{i:02d}",
            replay_fact_id=i,
            reason="final loss beyond tolerance and beyond the noise floor, step 1200" if i else "",
            duration_s=75.0,
        )
        for i in range(3)
    ]
    return DrillReport(
        pick="random",
        seed=123456789,
        since=None,
        count=3,
        backend="docker",
        candidates=40,
        started_at="2025-03-01T08:00:00Z",
        items=items,
        drill_id=7,
        ledger_head="12:" + "ab" * 32,
    )


@pytest.mark.parametrize("columns", [80, 200])
def test_a_drill_table_fits(columns: int) -> None:
    rep = _drill()
    text = drill_table(rep, columns)
    _fits(text, columns)
    for item in rep.items:
        assert item.run_id[:13] in text
    assert "DIVERGED" in text and "drill #7: 1 of 3 reproduced" in text
    assert "ab" * 32 in text  # the anchor is never cut: wrapped whole onto its own line
    if columns == 80:
        assert "left out to fit 80 columns" in text
    whole = drill_table(rep, None)  # drill --wide: nothing cut, nothing left out
    assert LONG_NAME in whole and "beyond the noise floor, step 1200" in whole
    assert "left out" not in whole and "…" not in whole


def test_fit_table_cuts_then_drops_by_rank_and_never_cuts_the_floor() -> None:
    cols = [Column("ID"), Column("NAME", min=6), Column("A", drop=2), Column("B", drop=1)]
    rows = [["0123456789abc", "a rather long name", "aaaa", "bbbb"]]
    whole = fit_table(cols, rows, None)
    assert whole.dropped == [] and not whole.cut and "a rather long name" in whole.text
    cut = fit_table(cols, rows, 36)  # cutting NAME is enough
    assert cut.dropped == [] and cut.cut and all(len(ln) <= 36 for ln in cut.lines)
    dropped = fit_table(cols, rows, 27)  # B goes first, then A
    assert dropped.dropped == ["B"] and all(len(ln) <= 27 for ln in dropped.lines)
    assert fit_table(cols, rows, 22).dropped == ["A", "B"]
    floor = fit_table(cols, rows, 5)  # narrower than the id: the id stays whole
    assert "0123456789abc" in floor.text
    assert wrap_line("key   value that wraps around", 18) == [
        "key   value that",
        "      wraps around",
    ]


def test_output_width_is_columns_else_the_terminal_else_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "93")
    assert output_width() == 93
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(sys, "stdout", open(os.devnull, "w"))  # noqa: SIM115  not a tty
    assert output_width() is None


def test_one_word_for_a_run_with_no_verdict(store_path: Path, filled: dict[str, str]) -> None:
    from replay_tui.tui.screens.runs import VERDICT_OPTIONS

    assert NOT_REPLAYED == "not-replayed"
    assert (NOT_REPLAYED, "none") in VERDICT_OPTIONS  # the TUI's filter says the same word
    new = replay_tui("runs", "--verdict", NOT_REPLAYED, "--json", store=store_path)
    assert new.returncode == 0, new.stderr
    ids = {r["id"] for r in json.loads(new.stdout)}
    assert filled["gappy"] in ids and filled["replay"] not in ids
    old = replay_tui("runs", "--verdict", "none", "--json", store=store_path)  # older spelling
    assert old.returncode == 0 and {r["id"] for r in json.loads(old.stdout)} == ids
    helped = replay_tui("runs", "--help", columns=200, store=store_path).stdout
    assert NOT_REPLAYED in helped and "|none" not in helped


def test_a_store_error_names_where_the_path_came_from(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg-data"  # the default store's folder, not made yet
    r = replay_tui("runs", XDG_DATA_HOME=str(xdg), REPLAY_TUI_STORE=None)
    assert r.returncode == 2, r.stderr
    default = xdg / "replay-tui" / "store.db"
    assert f"default store {default} (no --store or $REPLAY_TUI_STORE given)" in r.stderr
    assert "--store " + str(default) not in r.stderr
    typo = tmp_path / "stroe.db"
    r = replay_tui("runs", REPLAY_TUI_STORE=str(typo))
    assert r.returncode == 2 and f"$REPLAY_TUI_STORE={typo}: no store there" in r.stderr
    r = replay_tui("runs", store=typo, REPLAY_TUI_STORE=str(typo))  # both: --store was given
    assert r.returncode == 2 and f"--store {typo}: no store there" in r.stderr
    r = replay_tui("verify-store", REPLAY_TUI_STORE=str(typo))
    assert r.returncode == 2 and f"$REPLAY_TUI_STORE={typo}: no store there" in r.stderr
