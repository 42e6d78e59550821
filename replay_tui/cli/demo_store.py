"""Build a demo store from real tiny training runs made on the spot.

Four runs of ``examples/train_mlp.py`` in a fresh git repository beside the store: one
fully pinned (image digest, seed, deterministic mode, data hash), one with gaps (dirty
tree, an image known only by a local tag that no registry has, no seed, an unseeded
noise source), one that fails, and a second pinned run with another seed; then one
replay so a comparison exists.  Docker is used when an engine and the
training image are available (``scripts/docker-env.sh``); otherwise the local backend,
and the caller says so on screen.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from replay_tui.capture.options import RecordOptions
from replay_tui.errors import ReplayTuiError
from replay_tui.ops.record import record_run
from replay_tui.ops.replay import replay_and_judge
from replay_tui.replay.context import ReplayEvent
from replay_tui.replay.plan import ReplayOptions
from storage.store import RunStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_mlp.py"
QUICK = ["--epochs", "2", "--samples", "512", "--workers", "2"]

Say = Callable[[str], None]


@dataclass
class DemoResult:
    store_path: Path
    backend: str
    notice: str | None
    run_ids: dict[str, str]


def _git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "replay-tui demo",
        "GIT_AUTHOR_EMAIL": "demo@replay-tui.invalid",
        "GIT_COMMITTER_NAME": "replay-tui demo",
        "GIT_COMMITTER_EMAIL": "demo@replay-tui.invalid",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def make_demo_repo(repo: Path) -> Path:
    import numpy as np

    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    shutil.copy(EXAMPLE, repo / "train_mlp.py")
    (repo / ".gitignore").write_text("out/\ndata/\nruns/\n")
    g = np.random.default_rng(0)
    x = g.standard_normal((512, 16)).astype(np.float32)
    (repo / "data").mkdir()
    np.savez(repo / "data" / "train.npz", x=x, y=x[:, :4].argmax(1))
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "Tiny MLP training example")
    return repo


def docker_image() -> tuple[str | None, str | None]:
    """The training image to use, or None and the reason Docker is not used."""
    image = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not image:
        return None, "no training image (run scripts/docker-env.sh)"
    try:
        from replay_tui.replay.backends.docker.engine import client, ensure_image

        ensure_image(client(), image, pull=False)
    except ReplayTuiError as e:
        return None, e.message
    return image, None


def _local_only_tag(image: str) -> str | None:
    """Tag the training image under a name no registry has: a run 'by local image only'."""
    try:
        from replay_tui.replay.backends.docker.engine import client

        tag = "replay-tui/train-dev:hotfix"
        client().images.get(image).tag(tag)
        return tag
    except Exception:
        return None


def build_demo(store_path: Path, *, say: Say = print, use_docker: bool = True) -> DemoResult:
    """Record the demo runs into ``store_path`` and replay the pinned one."""
    image, why = docker_image() if use_docker else (None, "Docker not requested")
    backend = "docker" if image else "local"
    notice = None if image else f"Docker unavailable ({why}): the demo used the local backend"
    if notice:
        say(notice)
    repo = make_demo_repo(store_path.parent / "demo-repo")
    store = RunStore(store_path)
    ids: dict[str, str] = {}
    # In the image the interpreter is the image's python3; on the host, this one (it has torch).
    python = "python3" if image else sys.executable

    def rec(
        key: str, opts: RecordOptions, in_image: bool, image_override: str | None = None
    ) -> None:
        use = image_override or (image if in_image else None)
        say(f"recording {key}: {' '.join(opts.argv)}" + (f" in {use}" if use else ""))
        done = record_run(opts, store.path, lambda: store, image=use, on_line=_progress(say))
        ids[key] = done.run_id
        say(f"  -> run {done.run_id} {done.status}")

    base = dict(
        cwd=repo,
        data=["data/train.npz"],
        artifacts=["out/*"],
        metric_regex=[r"step (?P<step>\d+) loss (?P<value>[0-9.eE+-]+)"],
        metric_name="printed_loss",
    )
    for key, name, seed, purpose in (
        ("pinned", "mlp-pinned", 7, "baseline"),
        ("second-seed", "mlp-seed-8", 8, "seed-sweep"),
    ):
        rec(
            key,
            RecordOptions(
                argv=[python, "train_mlp.py", "--data", "data/train.npz", *QUICK],
                name=name,
                seed=seed,
                deterministic=True,
                tags={"team": "platform", "purpose": purpose},
                **base,  # type: ignore[arg-type]
            ),
            in_image=True,
        )
    script = repo / "train_mlp.py"
    script.write_text(script.read_text().replace("nn.Dropout(0.2)", "nn.Dropout(0.25)"))
    gappy_args = ["train_mlp.py", "--data", "data/train.npz", "--no-seed", "--unseeded-noise"]
    local_tag = _local_only_tag(image) if image else None
    rec(
        "gappy",
        RecordOptions(
            argv=[python if local_tag else sys.executable, *gappy_args, *QUICK],
            name="mlp-hotfix-unpinned",
            tags={"team": "research"},
            **base,  # type: ignore[arg-type]
        ),
        in_image=False,
        image_override=local_tag,
    )
    _git(repo, "checkout", "--", "train_mlp.py")
    rec(
        "failed",
        RecordOptions(
            argv=[python, "train_mlp.py", "--data", "data/train.npz", "--fail-at", "5", *QUICK],
            name="mlp-crash",
            seed=7,
            **base,  # type: ignore[arg-type]
        ),
        in_image=True,
    )
    say(f"replaying the pinned run with the {backend} backend")
    replayed = replay_and_judge(
        store, ids["pinned"], ReplayOptions(backend=backend), on_event=_stage_lines(say)
    )
    verdict = replayed.attempts[0].verdict if replayed.attempts else None
    say(f"  -> {verdict}")
    store.close()
    return DemoResult(store_path, backend, notice, ids)


def _progress(say: Say, every_s: float = 1.0) -> Callable[[str], None]:
    """The run's output, at most one line a second, so a recording is never silent."""
    last = [-every_s]

    def on_line(text: str) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s and text.strip():
            last[0] = now
            say(f"  | {text[:100]}")

    return on_line


def _stage_lines(say: Say) -> Callable[[ReplayEvent], None]:
    """Replay stage lines as ``replay`` prints them; the run's output throttled."""
    output = _progress(say)

    def on_event(ev: ReplayEvent) -> None:
        if ev.state == "log":
            output(ev.message)
        else:
            say(f"[{ev.stage:>8}] {ev.state:<6} {ev.message}".rstrip())

    return on_event
