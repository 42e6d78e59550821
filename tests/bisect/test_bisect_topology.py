"""The launch topology as a bisect factor: offered when the pair differs in it (the gap
``PAIR_TOPOLOGY_DIFFERS``, the same rule), applied by putting the other run's process
counts into the launcher's options, and untestable, with the reason, where a probe cannot
be given it (a command started directly against one started through a launcher, a run
on several nodes).

Real parts: a tiny DDP program (gloo on CPU, as torch's docs write one) recorded twice
with the real launcher through the real ``torchrun``, 2 processes and 1, from a real git
repository, and bisected on the local backend (three more torchrun starts: GOOD's replay,
the topology probe, the confirmation; about 30 s here).  The probes are also checked as
they are built from the recorded manifests (the command line and the launch group a
replay of each runs with), and the untestable cases on edited copies of them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay_tui.bisect import factors as fx
from replay_tui.bisect.probe import Side, build_probe
from replay_tui.bisect.run import _check_topology
from replay_tui.gaps import evaluate_pair
from replay_tui.replay.plan import ReplayOptions
from storage.manifest import RunManifest, manifest_from_data
from storage.store import RunStore
from tests.support.training import LOSS_REGEX, program_repo, record_run, replay_tui

DDP = '''"""A tiny DDP program: gloo on CPU, one shard of the data per process, a fixed batch
per process (so the world size changes the effective batch and the weights)."""

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(int(os.environ.get("REPLAY_TUI_SEED", "0")))
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    y = x[:, :2].sum(1, keepdim=True)
    xs, ys = x[rank::world], y[rank::world]
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        i = (step * 8) % len(xs)
        loss = torch.nn.functional.mse_loss(model(xs[i : i + 8]), ys[i : i + 8])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.8f}", flush=True)
    if rank == 0:
        Path("out").mkdir(exist_ok=True)
        torch.save(model.module.state_dict(), "out/model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


@dataclass
class Pair:
    store: Path
    two: RunManifest  # torchrun --nproc-per-node 2
    one: RunManifest  # torchrun --nproc-per-node 1
    two_side: Side
    one_side: Side


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    root = tmp_path_factory.mktemp("topology")
    store = root / "store" / "runs.db"
    repo = program_repo(root / "repo", {"ddp_train.py": DDP})
    common = ["--seed", "1", "--artifact", "out/*", "--metric-regex", LOSS_REGEX]
    common += ["--metric-name", "loss", "--"]
    ids = [
        record_run(store, repo, *common, "torchrun", "--standalone", "--nproc-per-node", str(n),
                   "ddp_train.py")
        for n in (2, 1)
    ]  # fmt: skip
    with RunStore(store) as s:
        two, one = (s.manifest(r) for r in ids)
        sides = [Side(m, tuple(s.locations(m.run_id))) for m in (two, one)]
    return Pair(store, two, one, *sides)


def _edited(m: RunManifest, argv: list[str]) -> RunManifest:
    data = copy.deepcopy(m.model_dump(mode="json"))
    data.pop("integrity", None)
    data["argv"] = argv
    from replay_tui.capture.probes import launch_info

    data["launch"] = launch_info(argv)
    return manifest_from_data(data)


@pytest.mark.slow
def test_the_recorded_pair_differs_in_topology_and_in_nothing_else(pair: Pair) -> None:
    assert pair.two.launch is not None and pair.two.launch.processes_per_node == 2
    assert pair.one.launch is not None and pair.one.launch.processes_per_node == 1
    assert pair.two.outputs.metric_history["loss"] != pair.one.outputs.metric_history["loss"]
    # compare's gap and the factor are one rule
    assert "PAIR_TOPOLOGY_DIFFERS" in {g.code for g in evaluate_pair(pair.one, pair.two)}
    rep = fx.diff_factors(pair.one, pair.two)
    assert [d.name for d in rep.differing] == ["topology"]  # config: the counts masked
    (d,) = rep.differing
    assert d.detail == ["processes per node 1 -> 2"]
    assert _check_topology(pair.one_side, pair.two_side, ReplayOptions(backend="local")) is None


@pytest.mark.slow
def test_a_probe_takes_the_other_runs_process_counts(pair: Pair) -> None:
    # GOOD (1 process) with BAD's topology: torchrun starts 2
    probe = build_probe(pair.one_side, pair.two_side, ["topology"], "good")
    assert probe.manifest.argv == [*pair.one.argv[:3], "2", *pair.one.argv[4:]]
    assert probe.manifest.argv[-1] == "ddp_train.py"
    assert probe.manifest.launch is not None and probe.manifest.launch.processes_per_node == 2
    assert probe.swapped == ("topology",)
    # held at GOOD's value: no swap keeps 1 process
    held = build_probe(pair.one_side, pair.two_side, [], "good")
    assert held.manifest.argv == pair.one.argv
    # the confirmation: BAD with GOOD's topology
    back = build_probe(pair.two_side, pair.one_side, ["topology"], "bad")
    assert back.manifest.argv == pair.one.argv
    # a config swap brings the donor's command line but keeps the base's counts
    other = _edited(
        pair.two, ["torchrun", "--max-restarts=0", "--nproc-per-node=2", "ddp_train.py"]
    )
    rep = fx.diff_factors(pair.one, other)
    assert [d.name for d in rep.differing] == ["config", "topology"]
    cfg = build_probe(pair.one_side, Side(other, pair.two_side.locations), ["config"], "good")
    assert cfg.manifest.argv == ["torchrun", "--max-restarts=0", "--nproc-per-node=1",
                                 "ddp_train.py"]  # fmt: skip
    # a launcher's count the base does not give is put first among its options
    bare = _edited(pair.one, ["torchrun", "--standalone", "ddp_train.py"])
    put = fx.with_topology(list(bare.argv), list(pair.two.argv))
    assert put == ["torchrun", "--nproc_per_node=2", "--standalone", "ddp_train.py"]
    # python -m torch.distributed.run, accelerate and deepspeed: their own options
    assert fx.with_topology(
        ["python", "-m", "torch.distributed.run", "--nproc_per_node", "1", "t.py", "--nnodes", "9"],
        ["torchrun", "--nproc-per-node=4", "t.py"],
    ) == ["python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "t.py", "--nnodes", "9"]
    assert fx.with_topology(
        ["accelerate", "launch", "--cpu", "--num_processes", "1", "t.py"],
        ["accelerate", "launch", "--num_processes=2", "t.py"],
    ) == ["accelerate", "launch", "--cpu", "--num_processes", "2", "t.py"]
    assert fx.with_topology(["python", "t.py"], list(pair.two.argv)) == ["python", "t.py"]


@pytest.mark.slow
def test_untestable_topology_says_why(pair: Pair) -> None:
    local = ReplayOptions(backend="local")
    direct = _edited(pair.two, ["python", "ddp_train.py"])
    rep = fx.diff_factors(direct, pair.two)
    assert "topology" in [d.name for d in rep.differing]
    why = _check_topology(Side(direct), pair.two_side, local)
    assert why is not None and "started directly and BAD through torchrun" in why
    multi = _edited(
        pair.two, ["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "ddp_train.py"]
    )
    why = _check_topology(pair.two_side, Side(multi), local)
    assert why is not None and "BAD ran on 2 nodes" in why and "local backend" in why
    why = _check_topology(pair.two_side, Side(multi), ReplayOptions(backend="docker"))
    assert why is not None and "docker backend" in why


@pytest.mark.slow
def test_bisect_of_two_processes_against_one_names_the_topology(pair: Pair) -> None:
    proc = replay_tui(
        pair.store, "bisect", pair.one.run_id, pair.two.run_id, "--backend", "local",
        "--times", "1", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["causes"] == ["topology"] and res["confirmed"] is True
    assert [(p["base"], p["swapped"], p["behaves_like"]) for p in res["probes"]] == [
        ("good", ["topology"], "BAD"),
        ("bad", ["topology"], "GOOD"),
    ]
    assert res["good_vs_bad"]["weight_rel_l2"] > 0.1  # the weights differ, as compare says
    assert {"factor": "topology", "what": "launch.processes_per_node", "good": 1, "bad": 2} in (
        res["env_diff"]
    )
    assert res["verdict"].startswith("the divergence follows the launch topology")
