"""Real ``torchrun`` and ``accelerate launch`` programs (``programs/``, written as the
frameworks' docs show: CPU, gloo, a tiny model, synthetic data), recorded with ``record``
and no flag beyond ``--artifact``: the manifests hold what the programs wrote and did
(metric histories from their TensorBoard files, the seed from argv, torch's determinism
switches as the processes left them, the config, the topology), each replays on the local
backend with every number equal bit for bit, and ``compare`` of the 2-process run with
the 1-process one names the topology as a critical gap and finds DIVERGED.

The runs are recorded once for the module (what takes time is torch's and accelerate's
start in each process)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay_tui.capture.frameworks import observe
from replay_tui.gaps import evaluate
from storage.manifest import RunManifest
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.training import cli_env, replay_tui

PROGRAMS = Path(__file__).resolve().parent / "programs"

pytestmark = pytest.mark.slow


@dataclass
class Runs:
    store: Path
    ddp2: RunManifest
    ddp1: RunManifest
    acc: RunManifest


def _env_without_accelerate() -> dict[str, str]:
    return {k: v for k, v in cli_env().items() if not k.startswith("ACCELERATE_")}


def _record(store: Path, repo: Path, argv: list[str], env: dict[str, str]) -> RunManifest:
    proc = replay_tui(
        store, "record", "--json", "--artifact", "out/**", "--", *argv, cwd=repo, env=env
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with RunStore(store) as s:
        return s.manifest(json.loads(proc.stdout)["run_id"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("launchers")
    files = {
        name: (PROGRAMS / name).read_text() for name in ("ddp_train.py", "accelerate_train.py")
    }
    repo = commit_repo(tmp / "repo", files, "programs", ignore="out/\n")
    store = tmp / "store" / "runs.db"
    env = _env_without_accelerate()

    def torchrun(n: int) -> RunManifest:
        argv = ["torchrun", "--standalone", "--nproc-per-node", str(n), "ddp_train.py"]
        m = _record(store, repo, [*argv, "--seed", "42"], env)
        shutil.rmtree(repo / "out")  # each run from an empty out/, as its replay
        return m

    ddp2, ddp1 = torchrun(2), torchrun(1)
    # recorded in a shell that has ACCELERATE_USE_CPU, as a user on a GPU host would
    acc_argv = ["accelerate", "launch", "--num_processes", "1", "accelerate_train.py"]
    acc_env = {**env, "ACCELERATE_USE_CPU": "1"}
    acc = _record(store, repo, [*acc_argv, "--seed", "42", "--lr", "0.05"], acc_env)
    return Runs(store, ddp2, ddp1, acc)


def _replay(store: Path, run_id: str, env: dict[str, str]) -> dict[str, object]:
    rep = replay_tui(store, "replay", run_id, "--backend", "local", "--json", env=env)
    assert rep.returncode == 0, (rep.stdout[-3000:], rep.stderr[-3000:])
    (out,) = json.loads(rep.stdout)["replays"]
    assert isinstance(out, dict)
    # every number the same bit for bit: the weights' tensors and each metric point; the
    # event file's own bytes hold wall times (declared volatile, its scalars compared as
    # metrics), so the word is EQUIVALENT, never IDENTICAL, for a run that writes one
    c = out["comparison"]
    assert out["verdict"] == "EQUIVALENT", c["reasons"]
    states = {a["path"]: a["state"] for a in c["artifacts"]}
    assert states.pop("out/model.pt") == "identical", c["artifacts"]
    assert all("events.out.tfevents." in p and st == "volatile" for p, st in states.items()), states
    assert c["metrics"] and all(x["bitwise_equal"] for x in c["metrics"]), c["metrics"]
    assert not c["gaps"], c["gaps"]
    return out


@pytest.mark.parametrize(("which", "procs"), [("ddp2", 2), ("ddp1", 1)])
def test_a_torchrun_run_is_read_field_by_field_and_replays(
    runs: Runs, which: str, procs: int
) -> None:
    m: RunManifest = getattr(runs, which)
    loss = m.outputs.metric_history["train/loss"]
    # 64 samples in batches of 8, shared by the processes, 2 epochs; rank 0 logs its own
    assert [s for s, _ in loss] == list(range(16 // procs))
    (source,) = set(m.outputs.metric_sources.values())
    assert source.startswith("out/tb/events.out.tfevents.")
    assert m.randomness.seed == 42  # --seed 42 on its command line
    assert m.config["seed"] == 42
    assert m.launch is not None
    assert (m.launch.launcher, m.launch.processes_per_node, m.launch.nodes) == (
        "torchrun",
        procs,
        1,
    )
    # torch.use_deterministic_algorithms(True) in each worker; torchrun's own process,
    # which imported torch too, is not a training process
    d = m.determinism
    assert d.deterministic_algorithms is True and d.source == observe.SOURCE
    assert d.cudnn_benchmark is False
    codes = {g.code for g in evaluate(m)}
    assert not codes & {"NO_METRICS", "SEED_UNKNOWN", "DETERMINISM_UNKNOWN", "DETERMINISM_OFF"}
    assert {a.path for a in m.outputs.artifacts} >= {"out/model.pt", source}
    _replay(runs.store, m.run_id, _env_without_accelerate())


def test_two_processes_against_one_is_a_critical_topology_gap_and_diverged(runs: Runs) -> None:
    proc = replay_tui(
        runs.store, "compare", runs.ddp2.run_id, runs.ddp1.run_id, "--json", "--no-store"
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["verdict"] == "DIVERGED", got["verdict"]
    text = json.dumps(got)
    assert "PAIR_TOPOLOGY_DIFFERS" in text
    assert any("PAIR_TOPOLOGY_DIFFERS" in c for c in got["probable_causes"])
    shown = replay_tui(runs.store, "compare", runs.ddp2.run_id, runs.ddp1.run_id, "--no-store")
    said = shown.stdout
    assert "processes per node 2 vs 1" in said
    # the topology is never filed under "no effect on numbers expected"
    other = said.split("no effect on numbers expected")
    assert all("launch" not in part.split("\n\n")[0] for part in other[1:])


def test_an_accelerate_run_is_read_and_replays_from_a_shell_with_other_switches(
    runs: Runs,
) -> None:
    m = runs.acc
    loss = m.outputs.metric_history["train_loss"]
    assert [s for s, _ in loss] == list(range(16))
    (source,) = set(m.outputs.metric_sources.values())
    assert source.startswith("out/run/events.out.tfevents.")
    assert m.randomness.seed == 42
    assert m.config["lr"] == 0.05
    assert m.launch is not None and m.launch.launcher == "accelerate"
    assert m.launch.processes_per_node is None  # --num_processes without --num_machines
    assert m.env["ACCELERATE_USE_CPU"] == "1"  # the shell's switch, recorded
    # the program asked for no deterministic algorithms: seen, not unknown
    d = m.determinism
    assert d.deterministic_algorithms is False and d.source == observe.SOURCE
    assert "DETERMINISM_OFF" in {g.code for g in evaluate(m)}
    # a shell without the recorded switch, and with one of its own that changes the
    # numbers (gradients accumulated over 4 batches): the recorded env is passed and the
    # host's cleared
    host = {**_env_without_accelerate(), "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}
    _replay(runs.store, m.run_id, host)
