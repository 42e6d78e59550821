"""GPU provenance of a run the launcher records from the outside, and of its replay.

The torch, CUDA, cuDNN and NCCL versions are read from a real interpreter's installed
files: a venv made here (``python -m venv --without-pip``) whose site-packages holds a
fake torch (``torch/version.py`` as torch ships it, and an ``__init__.py`` that fails if
anything imports it) and the nvidia-cudnn / nvidia-nccl distributions' metadata.  This
machine has no GPU and a CPU build of torch: the files are what a CUDA 13.0 install on
an H200 has, without the libraries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay_tui.capture import probes
from replay_tui.capture.executor import ExecSpec
from replay_tui.capture.launcher import record
from replay_tui.capture.options import RecordOptions
from replay_tui.gaps import evaluate
from replay_tui.replay.backends.docker import engine as dk
from replay_tui.replay.backends.slurm.script import docker_cli_args
from storage.store import RunStore
from tests.support.factories import apply_overrides, model, realistic_manifest

TORCH_VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.11.0+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '0123456789abcdef0123456789abcdef01234567'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""


def _site_packages(venv: Path) -> Path:
    """The venv's purelib folder, as its own interpreter reports it."""
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-I",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _dist(site: Path, name: str, version: str) -> None:
    """A minimal installed distribution: ``<name>-<version>.dist-info/METADATA``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def make_env(
    root: Path,
    *,
    version_py: str | None = TORCH_VERSION_PY,
    torch_dist: str = "2.11.0+cu130",
    nvidia: bool = True,
) -> Path:
    """A venv with a fake torch install; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = _site_packages(root)
    if version_py is not None:
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(
            "raise RuntimeError('the probe must not import torch')\n"
        )
        (site / "torch" / "version.py").write_text(version_py)
        _dist(site, "torch", torch_dist)
    if nvidia:
        _dist(site, "nvidia-cudnn-cu13", "9.19.0.56")
        _dist(site, "nvidia-nccl-cu13", "2.27.5")
        _dist(site, "nvidia-cudnn-cu12", "9.1.0.70")  # another CUDA's: not the one loaded
    return root / "bin" / "python"


@pytest.fixture(scope="module")
def cuda_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_env(tmp_path_factory.mktemp("cu130") / "venv")


# -- the versions, from the installed files -----------------------------------------------


def test_a_cuda_torch_install_gives_cuda_cudnn_and_nccl(cuda_python: Path) -> None:
    """Read from the files: the fake torch's __init__ raises, so an import would fail the
    probe (one interpreter start, the one that lists the packages)."""
    env = probes.probe_python(str(cuda_python))
    assert env.packages is not None and "torch==2.11.0+cu130" in env.packages
    assert env.torch_versions() == {
        "torch_version": "2.11.0+cu130",  # torch.__version__
        "cuda_version": "13.0",  # torch.version.cuda
        "cudnn_version": "91900",  # str(torch.backends.cudnn.version()), as the SDK has it
        "nccl_version": "2.27.5",  # torch.cuda.nccl.version() joined by dots
    }


def test_a_cpu_build_records_torch_and_no_cuda(tmp_path: Path) -> None:
    cpu = TORCH_VERSION_PY.replace("'2.11.0+cu130'", "'2.13.0+cpu'").replace(
        "cuda: Optional[str] = '13.0'", "cuda: Optional[str] = None"
    )
    env = probes.probe_python(str(make_env(tmp_path / "venv", version_py=cpu)))
    # the nvidia packages are there, but a CPU build loads neither
    assert env.torch_versions() == {
        "torch_version": "2.13.0+cpu",
        "cuda_version": None,
        "cudnn_version": None,
        "nccl_version": None,
    }


def test_no_torch_records_nothing(tmp_path: Path) -> None:
    env = probes.probe_python(str(make_env(tmp_path / "venv", version_py=None)))
    assert env.python_version and env.packages is not None
    assert set(env.torch_versions().values()) == {None}


def test_a_torch_that_ships_its_own_cudnn_leaves_cudnn_unknown(tmp_path: Path) -> None:
    python = make_env(tmp_path / "venv")
    lib = _site_packages(tmp_path / "venv") / "torch" / "lib"
    lib.mkdir()
    (lib / "libcudnn.so.9").write_bytes(b"")
    env = probes.probe_python(str(python))
    assert env.cuda_version == "13.0" and env.nccl_version == "2.27.5"
    assert env.cudnn_version is None  # the bundled one is loaded, not the package's


@pytest.mark.parametrize(
    "text",
    [
        "__version__ = '2.11.0'\n",  # no cuda line: not known, rather than "a CPU build"
        "__version__ = '2.11.0'\ncuda = '13.0; rm -rf /'\n",  # not a version
        "cuda = '13.0'\n",  # no __version__
        "__version__ = '2.11.0'\ncuda = '13.0'\n" + "#" * probes.MAX_VERSION_FILE,  # too big
    ],
)
def test_a_version_file_that_does_not_say_gives_nothing(tmp_path: Path, text: str) -> None:
    (tmp_path / "version.py").write_text(text)
    assert probes.torch_version_file([str(tmp_path)]) is None


def test_a_version_file_that_is_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "version.py")
    assert probes.torch_version_file([str(tmp_path)]) is None


@pytest.mark.parametrize(
    ("package", "number"),
    [("9.19.0.56", "91900"), ("9.1.0.70", "90100"), ("9.10.2.21", "91002"), ("8.9.2.26", "8902")],
)
def test_cudnn_package_versions_become_torchs_number(package: str, number: str) -> None:
    assert probes.cudnn_version_number(package) == number


# -- the interpreter of a launcher ----------------------------------------------------------


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    yield bindir


TORCHRUN = (
    "# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
    "from torch.distributed.run import main\n"
    "if __name__ == '__main__':\n    sys.exit(main())\n"
)


def test_torchrun_is_run_by_the_interpreter_of_its_shebang(
    cuda_python: Path, on_path: Path
) -> None:
    _script(on_path / "torchrun", f"#!{cuda_python}\n{TORCHRUN}")
    argv = ["torchrun", "--standalone", "--nproc_per_node=2", "train.py"]
    python = probes.interpreter_for(argv, sys.executable)
    assert python == str(cuda_python)
    assert probes.probe_python(python).torch_version == "2.11.0+cu130"


def test_an_env_shebang_is_looked_up_on_path(
    cuda_python: Path, on_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``#!/usr/bin/env python3`` is whichever python3 comes first on PATH: the venv's
    (an activated venv)."""
    monkeypatch.setenv("PATH", f"{on_path}{os.pathsep}{cuda_python.parent}{os.pathsep}/usr/bin")
    _script(on_path / "accelerate", f"#!/usr/bin/env python3\n{TORCHRUN}")
    python = probes.interpreter_for(["accelerate", "launch", "train.py"], sys.executable)
    assert python == str(cuda_python.parent / "python3")
    assert probes.probe_python(python).cuda_version == "13.0"


def test_pips_sh_exec_form_for_a_path_with_a_space(
    tmp_path: Path, cuda_python: Path, on_path: Path
) -> None:
    spaced = tmp_path / "my envs" / "bin" / "python3"
    spaced.parent.mkdir(parents=True)
    spaced.symlink_to(cuda_python)
    _script(
        on_path / "deepspeed",
        f"#!/bin/sh\n'''exec' \"{spaced}\" \"$0\" \"$@\"\n' '''\n{TORCHRUN}",
    )
    assert probes.interpreter_for(["deepspeed", "train.py"], "fallback") == str(spaced)


def test_a_relative_script_is_found_in_the_runs_folder(tmp_path: Path, cuda_python: Path) -> None:
    _script(tmp_path / "work" / "train.py", f"#!{cuda_python}\nprint('hi')\n")
    assert probes.interpreter_for(["./train.py"], "fallback", tmp_path / "work") == str(cuda_python)


@pytest.mark.parametrize(
    "text",
    [
        "#!/bin/bash\necho not python\n",  # a shell script
        "import sys\n",  # no shebang
        "#!/usr/bin/env\n",  # env with nothing to run
        "#!relative/python3\n",  # relative to wherever it is run from
    ],
)
def test_a_script_that_is_not_python_falls_back(on_path: Path, text: str) -> None:
    _script(on_path / "torchrun", text)
    assert probes.interpreter_for(["torchrun", "train.py"], "fallback") == "fallback"


def test_a_launcher_that_is_a_fifo_is_refused_without_waiting(on_path: Path) -> None:
    os.mkfifo(on_path / "torchrun")
    (on_path / "torchrun").chmod(0o755)
    assert probes.interpreter_for(["torchrun", "train.py"], "fallback") == "fallback"


def test_python_itself_is_still_taken_as_it_is(cuda_python: Path) -> None:
    assert probes.interpreter_for([str(cuda_python), "train.py"], "fallback") == str(cuda_python)


# -- a whole recording, uninstrumented -----------------------------------------------------

TRAIN = """\
import json, os, sys
inside = os.environ.get("INSIDE")
if inside:  # the SDK's handoff, as replay_tui.sdk writes it
    with open(os.path.join(os.environ["REPLAY_TUI_HANDOFF"], "inside.json"), "w") as f:
        f.write(inside)
print("step 1 loss 0.5")
"""


def _record(tmp_path: Path, argv: list[str]) -> Any:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(TRAIN)
    with RunStore(tmp_path / "store" / "runs.db") as store:
        res = record(RecordOptions(argv=argv, cwd=work), store)
    assert res.exit.status == "succeeded", res.log_path.read_text()
    return res.manifest


def test_an_uninstrumented_run_gets_its_torchs_versions(tmp_path: Path, cuda_python: Path) -> None:
    m = _record(tmp_path, [str(cuda_python), "train.py"])
    e = m.environment
    assert (e.torch_version, e.cuda_version, e.cudnn_version, e.nccl_version) == (
        "2.11.0+cu130",
        "13.0",
        "91900",
        "2.27.5",
    )


def test_the_sdks_in_run_view_wins(
    tmp_path: Path, cuda_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = {
        "environment": {
            "python_version": "3.11.7",
            "torch_version": "2.11.0+cu130",
            "cuda_version": "13.0",
            "cudnn_version": "91901",  # what the loaded library said, not the package
            "nccl_version": None,  # no GPU seen in the run
        }
    }
    monkeypatch.setenv("INSIDE", json.dumps(inside))
    e = _record(tmp_path, [str(cuda_python), "train.py"]).environment
    assert (e.cudnn_version, e.nccl_version) == ("91901", None)


def test_a_torchrun_recording_gets_the_launchers_torch(
    tmp_path: Path, cuda_python: Path, on_path: Path
) -> None:
    """The stand-in torchrun runs its script directly (no torch here to launch with)."""
    _script(
        on_path / "torchrun",
        f"#!{cuda_python}\nimport runpy, sys\nsys.argv = sys.argv[-1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n",
    )
    m = _record(tmp_path, ["torchrun", "--standalone", "--nproc_per_node=2", "train.py"])
    assert m.environment.torch_version == "2.11.0+cu130"
    assert m.environment.cuda_version == "13.0"
    # the launch topology the command line says, in the manifest's launch group
    assert m.launch is not None
    assert (m.launch.launcher, m.launch.processes_per_node, m.launch.nodes) == ("torchrun", 2, 1)
    (tmp_path / "plain").mkdir()
    plain = _record(tmp_path / "plain", [str(cuda_python), "train.py"])
    assert plain.launch is None and "launch" not in plain.body()  # old hashes unchanged


# -- launch topology ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "topology"),
    [
        (["torchrun", "--standalone", "--nproc_per_node=2", "train.py"], (2, 1)),
        (["torchrun", "--nproc-per-node", "4", "--nnodes", "2", "train.py"], (4, 2)),
        (["torchrun", "--nnodes=1:4", "--nproc_per_node=8", "train.py"], (8, None)),  # elastic
        (["torchrun", "--nproc_per_node=gpu", "train.py"], (None, None)),
        # the script's own options are not the launcher's
        (["torchrun", "--rdzv-backend", "c10d", "train.py", "--nnodes", "9"], (None, None)),
        (["/venv/bin/torchrun", "--standalone", "train.py", "--nproc_per_node=3"], (None, 1)),
        (["python", "-u", "-m", "torch.distributed.run", "--nproc-per-node=2", "t.py"], (2, None)),
        (
            ["python3", "-mtorch.distributed.launch", "--use_env", "--nproc_per_node", "2", "t.py"],
            (2, None),
        ),
        (
            [
                "accelerate",
                "launch",
                "--multi_gpu",
                "--num_processes",
                "8",
                "--num_machines",
                "2",
                "t.py",
            ],
            (4, 2),
        ),
        (["accelerate", "launch", "--num-processes=2", "t.py"], (None, None)),  # machines: config
        (["accelerate", "env"], (None, None)),
        (
            ["deepspeed", "--num_gpus", "2", "--num_nodes=1", "t.py", "--deepspeed", "c.json"],
            (2, 1),
        ),
        (["deepspeed", "t.py"], (None, None)),  # every GPU of the host: not said
        (["python", "train.py", "--nproc_per_node=2"], (None, None)),
        (["python", "-c", "print(1)"], (None, None)),
        ([], (None, None)),
    ],
)
def test_launch_topology(argv: list[str], topology: tuple[int | None, int | None]) -> None:
    assert probes.launch_topology(argv) == topology


# -- the gap says why ------------------------------------------------------------------------


def _cuda_gap(**overrides: Any) -> str:
    data = apply_overrides(realistic_manifest(), {"environment__cuda_version": None, **overrides})
    [gap] = [g for g in evaluate(model(data)) if g.code == "CUDA_VERSION_UNKNOWN"]
    return gap.message


def test_the_gap_says_a_cpu_build_has_no_cuda() -> None:
    msg = _cuda_gap(environment__torch_version="2.13.0+cpu")
    assert "torch 2.13.0+cpu is built without CUDA (a CPU build)" in msg


def test_the_gap_says_there_is_no_torch() -> None:
    msg = _cuda_gap(environment__torch_version=None, environment__packages=["numpy==2.3.0"])
    assert "torch is not installed" in msg


def test_the_gap_without_a_reason_stays_as_it_was() -> None:
    msg = _cuda_gap(environment__torch_version=None, environment__packages=None)
    assert msg == "GPUs were used but the CUDA version is not recorded"


# -- a Docker replay asks for the recorded GPUs ----------------------------------------------


def _kwargs(tmp_path: Path, gpus: Any) -> dict[str, Any]:
    ex = dk.DockerExecutor("img@sha256:" + "a" * 64, [], dk.CONTAINER_ROOT, dk.Sandbox(gpus=gpus))
    spec = ExecSpec(["python3", "train.py"], tmp_path, {}, tmp_path, tmp_path / "log")
    return ex.create_kwargs(spec)


@pytest.mark.parametrize(("gpus", "count"), [(True, 1), (1, 1), (2, 2), (8, 8)])
def test_the_device_request_is_the_recorded_count(tmp_path: Path, gpus: Any, count: int) -> None:
    """The GPU is mocked: this machine has none, so what is checked is the request the
    Docker engine would get (and its ``docker run`` form), never a container's GPUs.
    ``Sandbox.gpus`` carries the count (a bare True, from a caller that gives none: 1)."""
    [req] = _kwargs(tmp_path, gpus)["device_requests"]
    assert req["Count"] == count and req["Count"] != -1
    assert req["Capabilities"] == [["gpu"]]
    args, _ = docker_cli_args(_kwargs(tmp_path, gpus))
    assert args[args.index("--gpus") + 1] == str(count)


def test_no_gpus_asks_for_none(tmp_path: Path) -> None:
    assert "device_requests" not in _kwargs(tmp_path, False)
