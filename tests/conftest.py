"""Shared fixtures: a store file in a temp dir, realistic manifests, the CLI in process
and as a process; and the markers each test gets from the engines its fixtures need."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.keys import generate
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.helpers.replays import add_compared_replay
from tests.support.bundles import replay_of
from tests.support.factories import apply_overrides, realistic_manifest
from tests.support.inprocess import run_cli

REPO_ROOT = Path(__file__).resolve().parent.parent

MakeManifest = Callable[..., dict[str, Any]]
RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Where a test's SQLite store lives (a real file, created on first open)."""
    return tmp_path / "store.db"


@pytest.fixture
def make_manifest() -> MakeManifest:
    """Factory of realistic, valid, unsealed manifest dicts; each call is a new run.

    ``make_manifest(name="x", code__commit="...")`` overrides fields (``__`` reaches into
    groups); ``make_manifest(index=5)`` picks the run number explicitly.
    """
    counter = itertools.count()

    def make(index: int | None = None, **overrides: Any) -> dict[str, Any]:
        i = next(counter) if index is None else index
        return apply_overrides(realistic_manifest(i), overrides)

    return make


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the repo root importable (tests.support.factories)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("REPLAY_TUI_STORE", None)
    return env


@pytest.fixture
def cli(store_path: Path) -> RunCli:
    """Run ``replay-tui --store <store_path> ARGS...`` in this process (click's test
    runner, ``tests.support.inprocess``): exit code, stdout and stderr as a process
    would give them, without a fresh interpreter's start per call."""

    def run(*args: str | os.PathLike[str], store: Path | None = None) -> Any:
        return run_cli(store or store_path, *args)

    return run


@pytest.fixture
def cli_process(store_path: Path) -> RunCli:
    """Run ``replay-tui --store <store_path> ARGS...`` in a fresh process: for the tests
    where the separate process is the point."""

    def run(*args: str | os.PathLike[str], store: Path | None = None) -> Any:
        argv: Sequence[str] = [
            sys.executable,
            "-m",
            "replay_tui.cli",
            "--store",
            str(store or store_path),
            *map(str, args),
        ]
        return subprocess.run(
            argv, capture_output=True, text=True, env=subprocess_env(), timeout=120
        )

    return run


# -- markers from the engines a test needs, and the one worker that drives them -----

ENGINE_MARKERS = ("docker", "slurm", "podman", "apptainer")
"""The markers of the real engines; ``-m "not docker and not slurm and not podman and
not apptainer and not slow"`` (scripts/fast.sh) is the fast loop (CONTRIBUTING.md)."""

FIXTURE_ENGINES: dict[str, tuple[str, ...]] = {
    "engine": ("docker",),
    "train_image": ("docker",),
    "engine_image": ("docker",),
    "framework_image": ("docker",),
    "cluster": ("slurm", "docker"),
}
"""Fixtures that need a real engine, and the markers a test using one gets (besides the
markers a module or test states itself): a new test on these fixtures leaves the fast
loop without a line of its own."""

ENGINE_GROUP = "engines"
"""The xdist group of every test marked with an engine: under ``--dist loadgroup`` (the
default, pyproject.toml) they run one after another on one worker, started first (xdist
hands out the largest group first).  They share the engine's state (its containers,
the local registry's images, the Slurm cluster's one node and spool, Podman's store,
the Apptainer SIF cache) and ``tests.support.runtimes`` records its session run once
per worker; the other tests run beside them on the other workers."""


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, markers in FIXTURE_ENGINES.items():
            if fixture in names:
                for marker in markers:
                    if item.get_closest_marker(marker) is None:
                        item.add_marker(marker)
        if any(item.get_closest_marker(m) is not None for m in ENGINE_MARKERS):
            item.add_marker(pytest.mark.xdist_group(ENGINE_GROUP))
        elif item.get_closest_marker("xdist_group") is None and _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture that outlives one test and is made for its module
    (a module- or class-scoped store, recorded lab, terminal, whether the module defines
    it or a folder's conftest does): its module's tests then share one worker under
    ``-n``, the fixture is made once, and the module's tests see it in the order they
    are written (the TUI snapshots of one fixed store, split over two workers, drew the
    dashboard's background table with cut columns)."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        fixture = defs[-1]
        if fixture.scope in ("module", "class") and (
            fixture.baseid == module or module.startswith(f"{fixture.baseid}/")
        ):
            return True
        if fixture.scope != "function" and fixture.baseid == module:
            return True
    return False


TERMINAL_VARIABLES = ("COLUMNS", "LINES")
"""Variables an xdist worker starts with that the run was not given (``COLUMNS=80``,
``LINES=24``): the CLI fits its tables to ``$COLUMNS``, so a worker puts back what the
controller had, and a test sees the same environment under ``-n`` as without it."""


@pytest.hookimpl(optionalhook=True)  # an xdist hook, on the controller
def pytest_configure_node(node: Any) -> None:
    node.workerinput["replay_tui_terminal"] = {n: os.environ.get(n) for n in TERMINAL_VARIABLES}


def _quick_idle() -> None:
    """Textual's pilot counts the app idle after a 20 ms sleep in which the process used
    under 1 ms of CPU, and waits that out twice per key pressed and once per pause.  The
    tests wait for what they check themselves (``tests.support.app.settle``: queues
    empty, workers done, tables measured), so the pilot's window is 5 ms here (its CPU
    bound scaled with it): the TUI tests' time is mostly these sleeps otherwise, two
    workers on two cores half idle (bench/RESULTS.md)."""
    from textual import _wait

    # a private module of the pinned Textual: a rename must fail here, not slow the tests
    assert hasattr(_wait, "SLEEP_GRANULARITY") and hasattr(_wait, "SLEEP_IDLE"), _wait
    _wait.SLEEP_GRANULARITY = 1 / 200
    _wait.SLEEP_IDLE = _wait.SLEEP_GRANULARITY / 20.0


def pytest_configure(config: pytest.Config) -> None:
    _quick_idle()
    given = getattr(config, "workerinput", {}).get("replay_tui_terminal")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# -- a real Docker engine (scripts/docker-env.sh) ---------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    image = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    try:
        import docker

        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as e:  # pragma: no cover - environment problem
        msg = f"no Docker engine: {e} (run scripts/docker-env.sh)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    if not image:
        msg = "REPLAY_TUI_TRAIN_IMAGE unset (run scripts/docker-env.sh and source its env file)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    yield client
    client.close()


@pytest.fixture
def train_image(engine: Any) -> str:
    return os.environ["REPLAY_TUI_TRAIN_IMAGE"]


# -- an evidence bundle of a replayed store -----------------------------------------


@pytest.fixture
def replayed_store(store_path: Path, make_manifest: MakeManifest) -> tuple[Path, str]:
    """A store with one original run and an IDENTICAL replay of it (real comparison)."""
    orig = make_manifest(index=0)
    rep = replay_of(orig, make_manifest(index=1)["run_id"])
    log = b"step 1 loss 0.5\n"
    rep["outputs"]["log_sha256"] = hashlib.sha256(log).hexdigest()
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(orig))
        store.ingest(manifest_from_data(rep))
        verdict, _ = add_compared_replay(store, orig["run_id"], rep["run_id"])
        assert verdict == "IDENTICAL"
        # the log the launcher would have kept beside the store
        logs = store_path.parent / "logs"
        logs.mkdir()
        (logs / f"{rep['run_id']}.log").write_bytes(log)
    return store_path, orig["run_id"]


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("keys")
    pair = generate(d / "signer.key", d / "signer.pub")
    return pair.private_path, pair.public_path


@pytest.fixture
def bundle(replayed_store: tuple[Path, str], keypair: tuple[Path, Path], tmp_path: Path) -> Path:
    store_path, run_id = replayed_store
    out = tmp_path / "bundle"
    with RunStore(store_path) as store:
        export_bundle(store, run_id, out, key_path=keypair[0])
    return out
