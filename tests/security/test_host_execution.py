"""Items 2, 3 and 6 of the trust issue: nothing from a manifest or a run executes on the
host unasked.

Each attack uses real git repositories, the real store and the real CLI: a foreign
manifest ingested and replayed with the local backend, escape sequences that disguise
its command, environment variables that run code through ``python3``, git hooks and
fsmonitor planted in the recording repository, and a ``repo_url`` the host would fetch.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from storage.store import RunStore
from tests.helpers.foreign import host_claim, ingested
from tests.support.training import git, replay_tui


def test_a_foreign_run_never_runs_on_the_host_unasked(
    repo: Path, store: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    # disguised: the escape sequence erases the line and prints a harmless command over it
    argv = ["bash", "-c", f"touch {marker}; # \x1b[2K\r python3 train.py --epochs 1"]
    rid = ingested(store, tmp_path, host_claim(repo, argv))
    for extra in ([], ["--json"], ["--quiet"]):
        proc = replay_tui(store, "replay", rid, "--backend", "local", "--repo", str(repo), *extra)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        out = proc.stderr
        if extra == ["--json"]:
            err = json.loads(proc.stdout)
            out = f"{err['error']} {err['hint']}"
        assert "\x1b" not in proc.stdout + proc.stderr
        assert "came into this store through ingest" in out
        assert "--allow-foreign-on-host" in out
        assert "\\x1b[2K\\x0d" in out  # the real command, shown escaped
        assert not marker.exists()
    # a drill never runs it either
    proc = replay_tui(store, "drill", "--count", "1", "--backend", "local", "--quiet")
    assert proc.returncode != 0
    assert not marker.exists()
    # `show` prints the argv escaped, even to a pipe
    show = replay_tui(store, "show", rid)
    assert show.returncode == 0 and "\x1b" not in show.stdout and "\\x1b[2K" in show.stdout
    runs = replay_tui(store, "runs")
    assert "\x1b" not in runs.stdout
    # with explicit consent it runs (the user has read the command)
    proc = replay_tui(
        store, "replay", rid, "--backend", "local", "--repo", str(repo), "--allow-foreign-on-host"
    )
    assert marker.exists(), proc.stdout + proc.stderr


def test_a_locally_recorded_run_needs_no_flag(repo: Path, store: Path, tmp_path: Path) -> None:
    proc = replay_tui(
        store, "record", "--json", "--", sys.executable, "-c", "print('hi')", cwd=repo
    )
    rid = json.loads(proc.stdout)["run_id"]
    proc = replay_tui(store, "replay", rid, "--backend", "local")
    assert "came into this store" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # it ran (a verdict, not a refusal)


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONWARNINGS": "ignore::x.Y", "BROWSER": "touch pwned"},
        {"PYTHONINSPECT": "1"},
        {"GCONV_PATH": "/tmp/x"},
        {"PERL5OPT": "-Mx"},
        {"NODE_OPTIONS": "--require /tmp/x.js"},
        {"PYTHONUSERBASE": "/tmp/x"},
        {"NCCL_NET_PLUGIN": "/tmp/libx.so"},
        {"LD_PRELOAD": "/tmp/x.so"},
    ],
)
def test_environment_outside_the_allow_list_is_refused(
    repo: Path, store: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    rid = ingested(store, tmp_path, host_claim(repo, ["python3", "train.py"], env=env))
    for backend in ("local", "docker"):
        proc = replay_tui(store, "replay", rid, "--backend", backend, "--allow-foreign-on-host")
        assert proc.returncode == 2, proc.stderr
        assert "which a replay does not pass on" in proc.stderr
        assert sorted(env)[0] in proc.stderr


def test_allow_env_adds_a_name_but_never_a_loader(repo: Path, store: Path, tmp_path: Path) -> None:
    rid = ingested(store, tmp_path, host_claim(repo, ["true"], env={"PYTHONWARNINGS": "x"}))
    proc = replay_tui(store, "replay", rid, "--backend", "local", "--allow-env", "PYTHONWARNINGS")
    assert proc.returncode == 2 and "never passes PYTHONWARNINGS on" in proc.stderr


def test_git_hooks_and_fsmonitor_in_the_recording_repo_never_run(
    repo: Path, store: Path, tmp_path: Path
) -> None:
    proc = replay_tui(
        store, "record", "--json", "--", sys.executable, "-c", "print('hi')", cwd=repo
    )
    rid = json.loads(proc.stdout)["run_id"]
    # what a container with a writable .git used to plant
    hooks = repo / ".git" / "hooks"
    fired = tmp_path / "fired"
    fired.mkdir()
    for hook in ("post-checkout", "pre-commit", "post-merge", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {fired}/{hook}\n")
        (hooks / hook).chmod(0o755)
    git(repo, "config", "core.fsmonitor", f"touch {fired}/fsmonitor; true")
    proc = replay_tui(store, "replay", rid, "--backend", "local")
    assert proc.returncode in (0, 1), proc.stderr
    assert "worktree" in proc.stderr  # the checkout happened...
    assert sorted(p.name for p in fired.iterdir()) == []  # ...and nothing in .git ran


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[str]]]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Counter)
    hits: list[str] = []
    _Counter.hits = hits
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/team/model.git", hits
    server.shutdown()


def test_repo_url_is_not_fetched_without_the_flag(
    repo: Path, store: Path, tmp_path: Path, http_server: tuple[str, list[str]]
) -> None:
    url, hits = http_server
    data = host_claim(repo, ["true"])
    data["code"] = {"commit": "ab" * 20, "repo_url": url}
    rid = ingested(store, tmp_path, data)
    proc = replay_tui(store, "replay", rid, "--backend", "local", "--allow-foreign-on-host")
    assert proc.returncode == 3, proc.stderr
    assert "not fetched: fetching is a network action; pass --fetch-repo" in proc.stderr
    assert hits == []
    # with the flag, http:// (a local address, no TLS) is still not a protocol it uses
    proc = replay_tui(
        store, "replay", rid, "--backend", "local", "--allow-foreign-on-host", "--fetch-repo"
    )
    assert proc.returncode == 2 and "uses http: only https://, ssh://" in proc.stderr
    assert hits == []


@pytest.mark.parametrize(
    "url", ["ext::sh -c touch% /tmp/pwned-ext", "file:///etc", "/srv/git/x.git", "-uhelp"]
)
def test_dangerous_repo_urls_are_refused_cleanly(
    repo: Path, store: Path, tmp_path: Path, url: str
) -> None:
    data = host_claim(repo, ["true"])
    data["code"] = {"commit": "cd" * 20, "repo_url": url}
    rid = ingested(store, tmp_path, data)
    proc = replay_tui(
        store, "replay", rid, "--backend", "local", "--allow-foreign-on-host", "--fetch-repo"
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "repo_url" in proc.stderr
    assert not Path("/tmp/pwned-ext").exists()


def test_ingest_refuses_a_replay_claim(repo: Path, store: Path, tmp_path: Path) -> None:
    original = host_claim(repo, ["true"])
    rid = ingested(store, tmp_path, original)
    claim = host_claim(
        repo,
        ["true"],
        kind="replay",
        replay_of=rid,
        replay={"backend": "docker", "environment_pinned": True},
    )
    f = tmp_path / "claim.json"
    f.write_text(json.dumps(claim))
    with RunStore(store) as s:
        head = s.verify().head
    proc = replay_tui(store, "ingest", str(f))
    assert proc.returncode == 2
    assert "claims to be a replay (kind=replay)" in proc.stderr
    with RunStore(store) as s:
        assert s.verify().head == head  # nothing stored
        assert [r.id for r in s.list_runs()] == [rid]
