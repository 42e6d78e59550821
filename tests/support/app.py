"""Stores for the TUI tests, built from fixed manifests so every screen looks the same twice.

``build_fixed_store`` makes a store with 40 realistic runs (some with critical gaps), an
original run with a replay that diverged (real safetensors checkpoints in the object
store, so the comparison holds a real per-tensor diff), a replay that reproduced
exactly, a few more judged replays and a drill.  The store's clock is frozen while it is
built, so every timestamp is fixed too.  No test lives here; the helpers are imported
by the ``test_app*`` modules.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import shutil
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from textual.message import Message
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Log

from replay_tui.gaps import gap_counts
from replay_tui.replay.drill import DrillReport
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.screens.base import AppScreen
from replay_tui.tui.screens.comparison import ComparisonScreen
from replay_tui.tui.screens.drill import DrillScreen
from replay_tui.tui.screens.modals import ConfirmModal
from replay_tui.tui.screens.runs import RunsScreen
from storage import ledger
from storage.manifest import RunManifest, manifest_from_data
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.replays import add_attempt
from tests.support.bundles import replay_of
from tests.support.factories import apply_overrides, realistic_manifest
from tests.support.training import cli_env as cli_env
from tests.support.training import git as git
from tests.support.training import replay_tui

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXED_NOW = "2025-06-02T09:30:00.000Z"
ORIGINAL_ID = "01JRORIGINAL0000000000000A"
REPLAY_ID = "01JRREPLAY000000000000000B"
SAME_ORIGINAL_ID = "01JRSAMEORIG00000000000000"
SAME_REPLAY_ID = "01JRSAMEREPLAY000000000000"
RUNS = 40


@dataclass(frozen=True)
class FixedStore:
    path: Path
    original_id: str
    replay_id: str
    diverged_comparison: int
    identical_comparison: int
    critical_id: str


@contextmanager
def frozen_clock(now: str = FIXED_NOW) -> Iterator[None]:
    """The store's clock (``ingested_at``, fact ``created_at``) stands still."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ledger, "utc_now", lambda: now)
        yield


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checkpoints(folder: Path) -> tuple[Path, Path]:
    """Two real safetensors checkpoints: B has one tensor close and one outside tolerance."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    a = {
        "encoder.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "encoder.bias": rng.standard_normal(16).astype(np.float32),
        "head.weight": rng.standard_normal((4, 16)).astype(np.float32),
        "head.bias": np.zeros(4, dtype=np.float32),
    }
    b = dict(a)
    b["encoder.bias"] = a["encoder.bias"] * np.float32(1 + 1e-7)
    b["head.weight"] = a["head.weight"] + np.float32(0.02)
    folder.mkdir(parents=True, exist_ok=True)
    pa, pb = folder / "a.safetensors", folder / "b.safetensors"
    save_file(a, str(pa))
    save_file(b, str(pb))
    return pa, pb


def _history(points: list[list[float]], *, diverge_after: int | None) -> list[list[float]]:
    out = []
    for step, value in points:
        if diverge_after is not None and step > diverge_after:
            value = round(value + 0.002 * (step - diverge_after) / 50, 6)
        out.append([step, value])
    return out


def _named_run(seed: int, steps: int, **fields: Any) -> dict[str, Any]:
    """The realistic manifest ``seed`` with ``steps`` points of history, its top-level
    ``fields`` set."""
    return apply_overrides(realistic_manifest(seed, history_steps=steps), fields)


def _original_and_replay(ckpt_a: Path, ckpt_b: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    base = _named_run(
        500,
        40,
        run_id=ORIGINAL_ID,
        name="resnet50-imagenet-audit-2025q2",
        started_at="2025-05-30T08:00:00.000Z",
        ended_at="2025-05-30T14:12:30.000Z",
        duration_s=22350.0,
    )
    arts = base["outputs"]["artifacts"]
    arts[1] = {
        "path": "checkpoints/best.safetensors",
        "sha256": _sha256(ckpt_a),
        "size_bytes": ckpt_a.stat().st_size,
        "kind": "checkpoint",
        "tensor_sha256": None,
    }
    replay = replay_of(
        base,
        REPLAY_ID,
        started_at="2025-06-01T10:00:00.000Z",
        ended_at="2025-06-01T16:20:00.000Z",
        duration_s=22800.0,
        replay={
            "backend": "local",
            "environment_pinned": False,
            "network": "none",
            "gpus": "all",
            "cpu_fallback": False,
            "forced_data": False,
            "diff_applied": False,
            "determinism": "recorded",
            "reason": None,
        },
    )
    r_arts = replay["outputs"]["artifacts"]
    r_arts[1] = dict(arts[1], sha256=_sha256(ckpt_b), size_bytes=ckpt_b.stat().st_size)
    r_arts[2] = dict(arts[2], sha256="0" * 63 + "1")  # the training log differs
    hist = replay["outputs"]["metric_history"]
    hist["loss"] = _history(hist["loss"], diverge_after=1200)
    replay["outputs"]["metrics"]["loss"] = hist["loss"][-1][1]
    replay["outputs"]["metrics"]["throughput_samples_s"] = 812.5
    replay["hardware"]["driver_version"] = "550.90.07"
    pkgs = list(replay["environment"]["packages"])
    pkgs[3] = pkgs[3].split("==")[0] + "==9.9.9"
    replay["environment"]["packages"] = pkgs
    replay["environment"]["packages_sha256"] = hashlib.sha256("\n".join(pkgs).encode()).hexdigest()
    replay["environment"]["hostname"] = "gpu-node-063"
    replay["hardware"]["gpus"] = [
        dict(g, uuid="GPU-00000000-0000-0000-0000-00000000000" + str(k))
        for k, g in enumerate(replay["hardware"]["gpus"])
    ]
    return base, replay


def _same_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    orig = _named_run(
        600,
        20,
        run_id=SAME_ORIGINAL_ID,
        name="bert-base-drill-baseline",
        started_at="2025-05-20T09:00:00.000Z",
    )
    return orig, replay_of(orig, SAME_REPLAY_ID, started_at="2025-05-21T09:00:00.000Z")


def build_fixed_store(root: Path) -> FixedStore:
    """The store every snapshot is taken from (see the module doc)."""
    from replay_tui.compare.comparison import compare_runs
    from replay_tui.replay.runner import compare_and_store

    root.mkdir(parents=True, exist_ok=True)
    path = root / "store.db"
    with frozen_clock(), RunStore(path) as store:
        manifests: list[RunManifest] = []
        for i in range(RUNS):
            over: dict[str, Any] = {}
            if i % 9 == 4:
                over = {"image": None, "randomness__seed": None, "randomness__python": None}
            elif i % 7 == 3:
                over = {"env__PYTHONHASHSEED": "0", "randomness__python_hash_seed": None}
                over["determinism__cudnn_benchmark"] = True
            manifests.append(manifest_from_data(apply_overrides(realistic_manifest(i), over)))
        ckpt_a, ckpt_b = _checkpoints(root / "ckpt")
        objects = ObjectStore.beside(path)
        objects.put(ckpt_a, _sha256(ckpt_a))
        objects.put(ckpt_b, _sha256(ckpt_b))
        orig_d, rep_d = _original_and_replay(ckpt_a, ckpt_b)
        same_o, same_r = _same_pair()
        orig, rep = manifest_from_data(orig_d), manifest_from_data(rep_d)
        so, sr = manifest_from_data(same_o), manifest_from_data(same_r)
        manifests += [orig, rep, so, sr]
        store.ingest_many([(m, gap_counts(m), (), {}) for m in manifests])

        def replayed(a: RunManifest, b: RunManifest, backend: str, took: float, replay: Any) -> int:
            """Compare replay ``b`` with ``a``; store the comparison and the replay fact."""
            cmp = compare_runs(a, b, objects=objects)
            verdict, _, cid = compare_and_store(store, a, b, comparison=cmp)
            add_attempt(
                store,
                a.run_id,
                "succeeded",
                replay_run=b.run_id,
                backend=backend,
                verdict=verdict,
                duration_s=took,
                comparison_id=cid,
                body={"replay": replay, "verdict": verdict},
            )
            return cid

        cid = replayed(orig, rep, "local", 22800.0, rep_d["replay"])
        cid_same = replayed(so, sr, "docker", 812.0, {"backend": "docker"})
        judged = [("IDENTICAL", 1), ("EQUIVALENT", 2), ("INCOMPLETE", 5)]
        for verdict, i in judged:
            store.add_replay(
                manifests[i].run_id,
                replay_run=None,
                backend="docker",
                status="completed",
                verdict=verdict,
                reason=None if verdict != "INCOMPLETE" else "exit code 1",
                duration_s=600.0,
                comparison_id=None,
                body={"verdict": verdict},
            )
        # a cancelled attempt after the IDENTICAL one: shown apart, never the verdict
        store.add_replay(
            manifests[1].run_id,
            replay_run=None,
            backend="docker",
            status="cancelled",
            verdict=None,
            reason="cancelled before the replay finished",
            duration_s=3.0,
            comparison_id=None,
            body={"reason": "cancelled"},
            sets_verdict=False,
        )
        store.add_drill(
            False,
            {
                "pick": "random",
                "count": 3,
                "backend": "docker",
                "runs": [
                    {"run_id": SAME_ORIGINAL_ID, "status": "reproduced", "verdict": "IDENTICAL"},
                    {"run_id": ORIGINAL_ID, "status": "not_reproduced", "verdict": "DIVERGED"},
                    {"run_id": manifests[1].run_id, "status": "reproduced", "verdict": "IDENTICAL"},
                ],
            },
        )
    critical = next(m.run_id for m in manifests if gap_counts(m).critical)
    return FixedStore(path, ORIGINAL_ID, REPLAY_ID, cid, cid_same, critical)


# -- a real recorded run ----------------------------------------------------------------


def record_real_run(root: Path, *extra: str) -> tuple[Path, str]:
    """Record the example training with the real launcher in a fresh git repo.

    Returns the store path and the recorded run id.
    """
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shutil.copy(REPO_ROOT / "examples" / "train_mlp.py", repo / "train_mlp.py")
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", "train_mlp.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "example")
    store = root / "store.db"
    argv = ["record", "--seed", "1", "--artifact", "out/*", "--json", "--", "python"]
    argv += ["train_mlp.py", "--out", "out", "--epochs", "1", "--samples", "256"]
    argv += ["--workers", "0", *extra]
    done = replay_tui(store, *argv, cwd=repo)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return store, str(json.loads(done.stdout)["run_id"])


async def settle(pilot: Pilot[Any], rounds: int = 3) -> None:
    """Let every worker finish, every message land and every table measure its rows.

    A worker's last message is queued before the worker counts as finished, but it is
    handled later, on the screen's own turn: the wait is for the app's and the screen's
    nodes to have nothing queued, twice in a row (a handler runs in one turn, so a quiet
    queue is one whose messages were handled), and for no screen to have work due on a
    timer (``AppScreen.work_due``: the runs list's throttled search).  A DataTable
    measures new rows (its columns' widths) when its message queue is empty; a
    screenshot taken before that shows each column as wide as its label (seen twice, in
    the dashboard's snapshot on a loaded machine), so that is waited for too.  An input's
    cursor stops blinking (it stays shown): a screenshot would otherwise catch it on or
    off by the clock (seen in the drill form's snapshot under two test workers)."""
    from textual.widgets import DataTable, Input

    app = pilot.app
    for _ in range(rounds):
        await pilot.pause()
        await app.workers.wait_for_complete()
    for field in app.screen.query(Input):
        field.cursor_blink = False
    await pilot.pause()
    quiet = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        nodes = [app, *app.screen.walk_children(with_self=True)]
        queued = any(node.message_queue_size for node in nodes)
        tables = app.screen.query(DataTable)
        measuring = any(t._require_update_dimensions or t._updated_cells for t in tables)
        working = any(w.is_running for w in app.workers)
        due = any(isinstance(s, AppScreen) and s.work_due for s in app.screen_stack)
        quiet = 0 if (queued or measuring or working or due) else quiet + 1
        if quiet == 2:
            break
        await (pilot.pause() if quiet else pilot.pause(0.01))
    else:
        raise AssertionError("the app never settled: a message, a worker or a table's rows")
    await pilot.pause()


GATED = """\
import os, sys, time
gate = sys.argv[1]
os.makedirs("out", exist_ok=True)
fast = os.path.exists(gate)
for i in range(4 if fast else 3000):
    print(f"step {i} loss {1.0 / (i + 1)}", flush=True)
    if not fast:
        time.sleep(0.1)
with open("out/model.bin", "w") as f:
    f.write("weights")
"""


def record_gated_run(root: Path) -> tuple[Path, str, Path]:
    """A run recorded by the real launcher whose program is quick while the gate file
    exists and runs for minutes once it is gone (a cancel or Ctrl-C always lands mid-run).

    Returns the store, the run id and the gate file (still there)."""
    import json

    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "gated.py").write_text(GATED)
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", "gated.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "gated")
    gate = root / "gate"
    gate.touch()
    store = root / "store.db"
    argv = ["record", "--artifact", "out/*", "--json", "--", "python", "gated.py", str(gate)]
    done = replay_tui(store, *argv, cwd=repo, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return store, str(json.loads(done.stdout)["run_id"]), gate


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body in a fresh event loop (pytest takes the fixtures it names)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def wait_until(
    pilot: Pilot[None], predicate: Callable[[], bool], timeout: float = 60.0
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        await pilot.pause(0.01)


async def until_logged(pilot: Pilot[Any], screen: Screen[Any], says: Callable[[str], bool]) -> None:
    """Waits (five minutes at most) until a line of ``screen``'s ``#log`` ``says`` so."""
    log = screen.query_one("#log", Log)
    await wait_until(pilot, lambda: any(says(line) for line in log.lines), 300)


async def ask_to_quit(pilot: Pilot[Any]) -> ConfirmModal:
    """Presses q and returns the question it opens (the app's "quit?" confirmation)."""
    app = pilot.app
    await pilot.press("q")
    await wait_until(pilot, lambda: isinstance(app.screen, ConfirmModal))
    question = app.screen
    assert isinstance(question, ConfirmModal)
    return question


def local_app(store: Path) -> ReplayApp:
    """The app over ``store``, its replays and drills on the local backend."""
    return ReplayApp(store, replay_options_factory=lambda: ReplayOptions(backend="local"))


def ungated_app(gated: tuple[Path, str, Path]) -> tuple[Path, str, ReplayApp]:
    """The store and run id of ``record_gated_run``'s run, its gate removed (the program
    now runs for minutes: a cancel lands mid-run), and ``local_app`` over the store."""
    store, run_id, gate = gated
    gate.unlink()
    return store, run_id, local_app(store)


def footer_keys(app: ReplayApp) -> set[str]:
    """What the footer of the screen on top says its keys do."""
    from textual.widgets._footer import FooterKey

    return {k.description for k in app.screen.query(FooterKey)}


def runs_screen(app: ReplayApp) -> RunsScreen:
    screen = app.screen
    assert isinstance(screen, RunsScreen), type(screen).__name__
    return screen


ScreenT = TypeVar("ScreenT", bound=Screen[Any])


async def opened(
    pilot: Pilot[Any], how: Message | Callable[[], object], screen: type[ScreenT]
) -> ScreenT:
    """Post ``how`` to the app (a message) or call it (an action of the app), and wait,
    settled, for the ``screen`` it opens."""
    if isinstance(how, Message):
        pilot.app.post_message(how)
    else:
        how()
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, screen))
    await settle(pilot)
    shown = pilot.app.screen
    assert isinstance(shown, screen)
    return shown


async def comparison_shown(pilot: Pilot[Any]) -> ComparisonScreen:
    """The comparison screen, once it is on top with its comparison loaded."""
    app = pilot.app
    await wait_until(
        pilot, lambda: isinstance(app.screen, ComparisonScreen) and app.screen.view is not None
    )
    screen = app.screen
    assert isinstance(screen, ComparisonScreen)
    return screen


async def finished_drill(pilot: Pilot[Any], report: DrillReport) -> DrillScreen:
    """The drill screen opened from the app, shown as it is once ``report`` has come."""
    app = pilot.app
    assert isinstance(app, ReplayApp)
    screen = await opened(pilot, app.action_drill, DrillScreen)
    screen.show_progress(len(report.items), ReplayOptions(backend="local"))
    screen.post_message(DrillScreen.Finished(report))
    await wait_until(pilot, lambda: screen.report is not None)
    await settle(pilot)
    return screen


async def palette(pilot: Pilot[Any], command: str) -> None:
    """Run a command of the palette by typing its name, as a user does."""
    from textual.command import CommandPalette
    from textual.widgets import OptionList

    await pilot.press("ctrl+p")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, CommandPalette))
    await pilot.press(*command)
    await wait_until(
        pilot,
        lambda: any(
            command in str(o.prompt) for o in pilot.app.screen.query(OptionList).first().options
        ),
    )
    await pilot.press("enter")


# -- snapshots ---------------------------------------------------------------------------

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 60), id="200x60")]
"""The terminal sizes every snapshot is taken at."""
SnapCompare = Callable[..., bool]
Step = Callable[[Pilot[Any]], Awaitable[None]]


def snap_app(fixed: FixedStore) -> ReplayApp:
    """The app over ``fixed`` as a snapshot shows it: local replays, a fixed subtitle."""
    app = local_app(fixed.path)
    app.sub_title = "store.db"  # the temporary path changes from run to run
    return app


def then(*steps: Step) -> Step:
    """The steps, each after the app has settled, and a settle after the last; then, for
    the screenshot, the screen drawn the same twice in a row."""

    async def run(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        for step in steps:
            await step(pilot)
            await settle(pilot)
        await drawn_alike(pilot)

    return run


async def drawn_alike(pilot: Pilot[Any], rounds: int = 40) -> None:
    """Wait (a deadline of ``rounds`` frames, not a pause) until two renders of the screen
    in a row are the same: a table under a screen fits its columns to the width after a
    refresh, and a screenshot taken in between shows each column cut to its label (seen
    once in the dashboard's snapshot, two workers on a busy machine, with every queue
    empty and every table measured).  A screen that never stops changing is left to the
    snapshot to show."""
    before = pilot.app.export_screenshot()
    for _ in range(rounds):
        await pilot.pause(0.05)
        now = pilot.app.export_screenshot()
        if now == before:
            return
        before = now


def fixed_drill() -> DrillReport:
    from replay_tui.replay.drill import DrillItem

    return DrillReport(
        pick="random",
        seed=1234,
        since=None,
        count=3,
        backend="local",
        candidates=42,
        started_at="2025-06-02T09:30:00.000Z",
        items=[
            DrillItem(
                SAME_ORIGINAL_ID,
                "bert-base-drill-baseline",
                "reproduced",
                "IDENTICAL",
                "01JRDRILLREPLAY00000000001",
                11,
                None,
                812.0,
            ),
            DrillItem(
                ORIGINAL_ID,
                "resnet50-imagenet-audit-2025q2",
                "not_reproduced",
                "DIVERGED",
                "01JRDRILLREPLAY00000000002",
                12,
                "metric loss first differs at step 1250, leaves tolerance there",
                22800.0,
            ),
            DrillItem(
                "01JRDRILLNODATA00000000003",
                "vit-small-cifar100",
                "error",
                None,
                None,
                None,
                "data input /datasets/cifar100 is missing on this host",
                3.0,
            ),
        ],
        ended_at="2025-06-02T16:00:00.000Z",
        drill_id=7,
        ledger_head="9f" * 32,
    )
