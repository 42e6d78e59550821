"""The run's packages as ``record`` lists them: each distribution's name and version read
from the head of its METADATA, which must be what importlib.metadata's parser says."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import subprocess
import sys
from pathlib import Path

from replay_tui.capture.probes import PACKAGES_SNIPPET, packages_sha256, probe_python


def test_the_probe_lists_what_importlib_metadata_parses() -> None:
    env = probe_python(sys.executable)
    want = sorted(
        {
            f"{d.metadata['Name']}=={d.version}"
            for d in metadata.distributions()
            if d.metadata["Name"]
        }
    )
    assert env.packages == want and len(want) > 20
    assert env.packages_sha256 == packages_sha256(want)
    assert env.python_version == sys.version.split()[0]


def test_a_long_description_and_odd_headers_do_not_change_the_name(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "odd_pkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nname: Odd-Pkg\nVersion:  1.0 \nSummary: s\n\n"
        "Name: not-this\nVersion: 9\n" + "x" * 100_000 + "\n"
    )
    want = [f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions(path=[str(site)])]
    assert want == ["Odd-Pkg==1.0 "]  # the parser keeps a value's trailing space
    code = f"import sys; sys.path[:0] = [{str(site)!r}]\n" + PACKAGES_SNIPPET
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert want[0] in json.loads(out.stdout)["packages"] and "not-this" not in out.stdout
