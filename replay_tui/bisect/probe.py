"""A probe: an ordinary replay of one run with some factors taken from the other.

``build_probe(base, donor, swapped)`` copies ``base``'s manifest and puts ``donor``'s
values in for the swapped factors; the result goes through the replay pipeline like any
run (every backend runs it).  Each input is then looked up on this host where the run
it came from recorded it: the data of the run that gave the data, the repository of the
run that gave the code.

How each factor is swapped (see ``factors``):

- ``code``: ``code`` (commit, diff) from the donor; the checkout is found in the donor's
  recorded repository (``ReplayOptions.repo``), its stored diff in the store.
- ``image``: ``image`` from the donor: the backend pulls that digest.
- ``data``: ``data`` from the donor, each input at the donor's recorded location.
- ``config``: the donor's argv (with the seed values of the seed side put back), its
  workdir, and what it captured (artifacts land where its command line writes them).
- ``topology``: the donor's process counts put into the launcher's options of the
  command line (``factors.with_topology``: ``--nproc-per-node``, ``--num_processes``,
  ``--num_gpus``...); without it the counts stay the base's, even in the donor's command
  line when config is swapped (the same launcher only: ``run`` checks that first).
- ``seed``: ``REPLAY_TUI_SEED`` / ``PYTHONHASHSEED`` from the donor (the SDK's
  ``seed_everything`` takes ``REPLAY_TUI_SEED`` over its argument, so this is the seed
  the program uses) and the donor's values of ``--seed`` style options on the command
  line.
- ``determinism`` / ``environment``: those environment variables from the donor.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.bisect import factors as fx
from replay_tui.sdk import uuid7
from storage.manifest import RunManifest, manifest_from_data
from storage.store import Location


@dataclass(frozen=True)
class Side:
    """One run and where its inputs live on this host."""

    manifest: RunManifest
    locations: tuple[Location, ...] = ()

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def repo(self) -> Path | None:
        return next((Path(x.host_path) for x in self.locations if x.role == "repo"), None)

    def data_locations(self) -> dict[str, str]:
        return {x.name: x.host_path for x in self.locations if x.role == "data"}


@dataclass(frozen=True)
class Probe:
    """A manifest to replay and where its inputs are."""

    manifest: RunManifest
    base: str  # "good" or "bad": the run the probe is a copy of
    swapped: tuple[str, ...]  # factors taken from the other run
    data_locations: dict[str, str]
    repo_location: Path | None  # where data inside a repository is placed from
    code_repo: Path | None  # a clone that has the probe's commit


def _env(base: RunManifest, donor: RunManifest, swapped: Collection[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for part in ("seed", "determinism", "environment"):
        src = donor if part in swapped else base
        env.update(fx.env_of(src, part))
    return env


def build_probe(base: Side, donor: Side, swapped: Collection[str], base_role: str) -> Probe:
    """``base`` with ``donor``'s values for each factor in ``swapped``."""
    unknown = set(swapped) - set(fx.FACTORS)
    if unknown:
        raise ValueError(f"not factors: {sorted(unknown)}")
    b, d = base.manifest, donor.manifest
    data: dict[str, Any] = b.model_dump(mode="json")
    for key in ("integrity", "config_hash"):
        data.pop(key, None)
    data["run_id"] = uuid7()
    data["kind"] = "original"
    data["replay_of"] = None
    data["replay"] = None
    if "code" in swapped:
        data["code"] = d.code.model_dump(mode="json")
    if "image" in swapped:
        data["image"] = None if d.image is None else d.image.model_dump(mode="json")
    if "data" in swapped:
        data["data"] = [x.model_dump(mode="json") for x in d.data]
    config_side = d if "config" in swapped else b
    seed_side = d if "seed" in swapped else b
    topology_side = d if "topology" in swapped else b
    argv = fx.with_seed_values(list(config_side.argv), fx.seed_values(seed_side.argv))
    data["argv"] = fx.with_topology(argv, list(topology_side.argv))
    from replay_tui.capture.probes import launch_info

    data["launch"] = launch_info(data["argv"])
    data["workdir"] = config_side.workdir
    data["config"] = dict(config_side.config)
    data["capture"] = (
        None if config_side.capture is None else config_side.capture.model_dump(mode="json")
    )
    data["outputs"] = config_side.outputs.model_dump(mode="json")
    data["randomness"] = seed_side.randomness.model_dump(mode="json")
    data["env"] = _env(b, d, swapped)
    data["tags"] = {**b.tags, "bisect_probe": "+".join(sorted(swapped)) or "none"}
    manifest = manifest_from_data(data, source="bisect probe")
    data_side = donor if "data" in swapped else base
    code_side = donor if "code" in swapped else base
    return Probe(
        manifest=manifest,
        base=base_role,
        swapped=tuple(f for f in fx.FACTORS if f in swapped),
        data_locations=data_side.data_locations(),
        repo_location=data_side.repo or code_side.repo,
        code_repo=code_side.repo,
    )
