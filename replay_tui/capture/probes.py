"""Probes that read the world a run happens in: git, packages, OS, hardware, env vars.

Every probe returns ``None`` (or an empty value) for what it cannot know; absence is
recorded as absence, never as an error and never as a guess.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from storage.vocabulary import TRAINING_ENV_NAMES, TRAINING_ENV_PREFIXES, is_training_env

# Variables that change what training computes (storage.vocabulary, the one list a replay
# passes on too).  Prefixes end with '_'.
TRAINING_ENV = (*TRAINING_ENV_NAMES, *TRAINING_ENV_PREFIXES)


def training_env(environ: Mapping[str, str], extra: Sequence[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` that affect training, plus the ones named in ``extra``."""
    out: dict[str, str] = {}
    for k, v in environ.items():
        if k in extra or is_training_env(k):
            out[k] = v
    return dict(sorted(out.items()))


# -- git ------------------------------------------------------------------------------


@dataclass
class GitState:
    root: Path | None = None
    repo_url: str | None = None
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    diff: bytes | None = None
    untracked: list[str] = field(default_factory=list)
    workdir: str = "."


def scrub_url(url: str) -> str:
    """Remove credentials from a remote URL before it is recorded."""
    with contextlib.suppress(ValueError):
        parts = urlsplit(url)
        if parts.username or parts.password:
            host = parts.hostname or ""
            if parts.port:
                host += f":{parts.port}"
            return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


_GIT_LOCATION_VARS = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
        "GIT_CEILING_DIRECTORIES",
    }
)
"""Variables that would point git at another repository, index or object store than
the one holding the folder (set inside a git hook, say): the probe drops them."""


def _git_env() -> dict[str, str]:
    """The environment the probe runs git in.  The repository is found from the folder
    upwards as GitPython found it: GIT_DIR and GIT_CEILING_DIRECTORIES do not change which
    one, and a filesystem boundary does not stop the search.  ``git status`` takes no
    optional lock, so a probe never makes the user's own git commands fail."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    env["GIT_DISCOVERY_ACROSS_FILESYSTEM"] = "1"
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def _run_git(
    cwd: Path, env: Mapping[str, str], *commands: Sequence[str]
) -> list[tuple[int, bytes]]:
    """Run the git ``commands`` side by side in ``cwd``: ``(exit status, stdout)`` of each.
    Raises OSError where git cannot be started (not installed, ``cwd`` missing)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    ["git", *args],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
    except OSError:
        for p in procs:
            p.kill()
            p.communicate()
        raise
    results = []
    for p in procs:
        out, _ = p.communicate()
        results.append((p.returncode, out))
    return results


def _toplevel(out: bytes, cwd: Path) -> tuple[Path, Path] | None:
    """``(work tree root, git dir)`` from ``git rev-parse --show-toplevel --git-dir``:
    one path a line, so a path with a newline in it is told apart by which split names
    two folders."""
    lines = out.removesuffix(b"\n").split(b"\n")
    for i in range(1, len(lines)):
        top, git_dir = b"\n".join(lines[:i]), cwd / os.fsdecode(b"\n".join(lines[i:]))
        if len(lines) == 2 or (os.path.isdir(top) and git_dir.is_dir()):
            return Path(os.fsdecode(top)), git_dir
    return None


@dataclass
class _Status:
    commit: str | None = None
    branch: str | None = None
    dirty: bool = False
    untracked: list[str] = field(default_factory=list)


def _parse_status(out: bytes, has_index: bool) -> _Status:
    """``git status --porcelain=v2 --branch --untracked-files=all -z``, read as GitPython
    read the repository: ``dirty`` where the index differs from HEAD (only when there is
    an index file) or the work tree from the index (``git diff``), untracked files as
    ``git status`` lists them.  A submodule with nothing but untracked files in it does
    not make the repository dirty (``git diff`` does not show it)."""
    s = _Status()
    records = iter(out.split(b"\0"))
    for rec in records:
        kind = rec[:2]
        if rec.startswith(b"# branch.oid "):
            oid = rec[len(b"# branch.oid ") :].decode("ascii", "replace")
            s.commit = None if oid == "(initial)" else oid
        elif rec.startswith(b"# branch.head "):
            head = rec[len(b"# branch.head ") :].decode("utf-8", "replace")
            s.branch = None if head == "(detached)" else head
        elif kind == b"? ":
            s.untracked.append(os.fsdecode(rec[2:]))
        elif kind == b"u ":
            s.dirty = True
        elif kind in (b"1 ", b"2 "):
            if kind == b"2 ":
                next(records, None)  # the path it was renamed or copied from
            fields = rec.split(b" ", 3)
            x, y, sub = chr(fields[1][0]), chr(fields[1][1]), fields[2].decode("ascii")
            only_untracked_inside = sub.startswith("S") and sub[1:3] == ".." and y == "M"
            if (x != "." and has_index) or (y != "." and not only_untracked_inside):
                s.dirty = True
    return s


def _remote_url(cwd: Path, env: Mapping[str, str], config: bytes) -> str | None:
    """The first URL of the remote named ``origin``, else of the first remote in the
    repository's own config file (GitPython's ``repo.remotes`` order), as ``git remote
    get-url`` gives it (``url.<base>.insteadOf`` applied); credentials removed."""
    names: list[str] = []
    for rec in config.split(b"\0"):
        key = rec.split(b"\n", 1)[0]
        if key.startswith(b"remote.") and key.count(b".") >= 2:
            name = os.fsdecode(key[len(b"remote.") : key.rindex(b".")])
            if name not in names:
                names.append(name)
    if not names:
        return None
    name = "origin" if "origin" in names else names[0]
    try:
        [(rc, out)] = _run_git(cwd, env, ("remote", "get-url", "--all", "--", name))
    except OSError:
        return None
    if rc != 0:
        return None
    return scrub_url(out.split(b"\n")[0].decode("utf-8", "replace"))


def probe_git(cwd: Path) -> GitState:
    """Code identity of ``cwd`` from the ``git`` command line: the work tree's root, the
    commit and branch, the remote's URL, the dirty flag with the diff against HEAD, and
    the untracked files (paths from the root, ignored files left out).

    The repository is the one that holds ``cwd`` (GIT_DIR is not followed).  An empty
    :class:`GitState` where there is none, where ``cwd`` is a bare repository or inside a
    ``.git`` folder, where git is not installed or refuses the repository (``safe.directory``);
    only root and workdir where there is no commit yet, or where ``git status`` fails (git
    older than 2.11 has no ``--porcelain=v2``).  Three git processes run side by side, a
    fourth for the remote's URL, a fifth for the diff of a dirty tree.
    """
    env = _git_env()
    try:
        (top_rc, top), (status_rc, status), (_, config) = _run_git(
            cwd,
            env,
            ("rev-parse", "--show-toplevel", "--git-dir"),
            ("status", "--porcelain=v2", "--branch", "--untracked-files=all", "-z"),
            ("config", "--local", "--includes", "-z", "--get-regexp", r"^remote\..*\."),
        )
    except OSError:
        return GitState()
    found = _toplevel(top, cwd) if top_rc == 0 else None
    if found is None:
        return GitState()
    root, git_dir = found[0].resolve(), found[1]
    state = GitState(root=root)
    state.workdir = os.path.relpath(cwd.resolve(), root).replace(os.sep, "/")
    if status_rc != 0:
        return state
    s = _parse_status(status, has_index=(git_dir / "index").is_file())
    if s.commit is None:  # no commits yet
        return state
    state.commit, state.branch = s.commit, s.branch
    state.repo_url = _remote_url(cwd, env, config)
    state.untracked = sorted(s.untracked)
    state.dirty = s.dirty
    if state.dirty:
        proc = subprocess.run(
            ["git", "diff", "--binary", "HEAD"],
            cwd=root,
            env=env,
            capture_output=True,
            check=True,
        )
        state.diff = proc.stdout
    return state


# -- packages, OS ---------------------------------------------------------------------

# 'torch': the folders of the torch package ``import torch`` would load, found by
# ``find_spec`` (which runs nothing of torch; the caller reads torch/version.py itself,
# bounded), [] where there is none, None where the lookup failed.  'packages': each
# distribution's ``Name==Version`` read from the head of its METADATA (the lines before
# the first blank one) by a plain scan: the same names and versions ``metadata['Name']``
# and ``version`` give, without the email parser walking every long description (188
# distributions: 0.49-0.51 s against 1.33-1.52 s, the same list).
PACKAGES_SNIPPET = (
    "import importlib.metadata as m, importlib.util as u, json, sys\n"
    "try:\n"
    "    s = u.find_spec('torch')\n"
    "    t = None if s and s.submodule_search_locations is None else"
    " [str(p) for p in (s.submodule_search_locations if s else ())]\n"
    "except Exception:\n"
    "    t = None\n"
    "def head(d):\n"
    "    text = d.read_text('METADATA') or d.read_text('PKG-INFO') or d.read_text('') or ''\n"
    "    got = {}\n"
    "    for line in text.splitlines():\n"
    "        if not line:\n"
    "            break\n"
    "        k, sep, v = line.partition(':')\n"
    "        if sep and k.lower() in ('name', 'version'):\n"
    "            got.setdefault(k.lower(), v.lstrip())\n"
    "    return got.get('name'), got.get('version')\n"
    "print(json.dumps({'python': sys.version.split()[0], 'torch': t, 'packages': sorted({"
    "f'{n}=={v}' for n, v in map(head, m.distributions()) if n})}))"
)


@dataclass
class PythonEnv:
    python_version: str | None = None
    packages: list[str] | None = None
    packages_sha256: str | None = None
    # torch as its installed files say (torch/version.py, the nvidia-* packages), read
    # without importing it; None where unknown.  A CPU build has a torch_version and no
    # CUDA, cuDNN or NCCL version.
    torch_version: str | None = None
    cuda_version: str | None = None
    cudnn_version: str | None = None
    nccl_version: str | None = None

    def torch_versions(self) -> dict[str, str | None]:
        """The four versions, keyed as the manifest's ``environment`` keys them."""
        return {
            "torch_version": self.torch_version,
            "cuda_version": self.cuda_version,
            "cudnn_version": self.cudnn_version,
            "nccl_version": self.nccl_version,
        }


def packages_sha256(packages: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(packages)).encode("utf-8")).hexdigest()


def probe_python(interpreter: str) -> PythonEnv:
    """Python version and ``name==version`` list of the interpreter that runs the command."""
    try:
        proc = subprocess.run(
            [interpreter, "-I", "-c", PACKAGES_SNIPPET],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        data = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return PythonEnv()
    pkgs = [str(p) for p in data["packages"]]
    env = PythonEnv(str(data["python"]), pkgs, packages_sha256(pkgs))
    torch_dirs = data.get("torch")
    if isinstance(torch_dirs, list):
        fill_torch_versions(env, [str(d) for d in torch_dirs])
    return env


# -- torch, CUDA, cuDNN and NCCL from the installed files ----------------------------

MAX_VERSION_FILE = 16 * 1024
_QUOTED = r"""'([^'"\\\x00-\x1f\x7f]{1,200})'|"([^'"\\\x00-\x1f\x7f]{1,200})"|(None)"""
_VERSION_LINE = re.compile(rf"(__version__|cuda)\s*(?::[^=]*)?=\s*(?:{_QUOTED})\s*(?:#.*)?")
_CUDA_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_DIST_VERSION = re.compile(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")


def read_head(path: str | Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of a regular file; None for anything else (a FIFO, a
    device, a folder) and for what cannot be opened.  Opened non-blocking and checked
    once open, so a file swapped for a FIFO is never waited on."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def torch_version_file(torch_dirs: Sequence[str]) -> tuple[str, str | None] | None:
    """``(torch.__version__, torch.version.cuda)`` read as text from ``version.py`` in the
    first of ``torch_dirs`` that has one (never run; at most 16 KiB).  None where the
    file or either assignment is missing, so ``cuda = None`` (a CPU or ROCm build) is
    told apart from not knowing."""
    for d in torch_dirs:
        raw = read_head(Path(d) / "version.py", MAX_VERSION_FILE + 1)
        if raw is None:
            continue
        if len(raw) > MAX_VERSION_FILE:
            return None
        found: dict[str, str | None] = {}
        for line in raw.decode("utf-8", "replace").splitlines():
            m = _VERSION_LINE.fullmatch(line.strip())
            if m and m.group(1) not in found:
                found[m.group(1)] = m.group(2) or m.group(3)  # None for `= None`
        version, cuda = found.get("__version__"), found.get("cuda", "")
        if not version or cuda == "" or (cuda is not None and not _CUDA_VERSION.fullmatch(cuda)):
            return None
        return version, cuda
    return None


def _dist_version(packages: Sequence[str], name: str) -> str | None:
    """The version of distribution ``name`` (normalised: ``nvidia-cudnn-cu13``) in a
    ``name==version`` list."""
    for p in packages:
        n, sep, v = p.partition("==")
        if sep and re.sub(r"[-_.]+", "-", n).lower() == name:
            return v
    return None


def cudnn_version_number(version: str) -> str | None:
    """A cuDNN release (``9.19.0.56``: the nvidia-cudnn package's version) as the number
    ``torch.backends.cudnn.version()`` gives and the SDK records (``"91900"``): from
    cuDNN 9 on, major*10000 + minor*100 + patch (cudnn_version.h's CUDNN_VERSION); up to
    cuDNN 8, major*1000 + minor*100 + patch (8.9.2 -> ``"8902"``)."""
    m = _DIST_VERSION.match(version)
    if not m:
        return None
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if minor > 99 or patch > 99:
        return None
    return str(major * (10000 if major >= 9 else 1000) + minor * 100 + patch)


def nccl_version_text(version: str) -> str | None:
    """An NCCL release (``2.27.5``: the nvidia-nccl package's version) as the SDK records
    ``torch.cuda.nccl.version()``: its three numbers joined by dots."""
    m = _DIST_VERSION.match(version)
    if not m or m.group(3) is None:
        return None
    return f"{int(m.group(1))}.{int(m.group(2))}.{int(m.group(3))}"


def _bundled(torch_dirs: Sequence[str], prefix: str) -> bool:
    """Whether torch carries its own copy of a library (``torch/lib/libcudnn*``): an
    nvidia-* package's version is then not known to be the one loaded."""
    for d in torch_dirs:
        with contextlib.suppress(OSError):
            if any(n.startswith(prefix) for n in os.listdir(Path(d) / "lib")):
                return True
    return False


def fill_torch_versions(env: PythonEnv, torch_dirs: Sequence[str]) -> None:
    """Fill ``env``'s torch, CUDA, cuDNN and NCCL versions from the installed files.

    torch and CUDA come from torch/version.py (``torch.__version__``,
    ``torch.version.cuda``); cuDNN and NCCL from the nvidia-cudnn-cuNN and
    nvidia-nccl-cuNN packages of that CUDA's major version (what a pip-installed torch
    loads), in the form the SDK records them.  A CPU build leaves CUDA, cuDNN and NCCL
    unknown; a torch that ships its own cuDNN or NCCL leaves that one unknown.
    """
    found = torch_version_file(torch_dirs)
    if found is None:
        return
    env.torch_version, env.cuda_version = found
    if env.cuda_version is None or not env.packages:
        return
    suffix = f"cu{env.cuda_version.split('.')[0]}"
    cudnn = _dist_version(env.packages, f"nvidia-cudnn-{suffix}")
    if cudnn and not _bundled(torch_dirs, "libcudnn"):
        env.cudnn_version = cudnn_version_number(cudnn)
    nccl = _dist_version(env.packages, f"nvidia-nccl-{suffix}")
    if nccl and not _bundled(torch_dirs, "libnccl"):
        env.nccl_version = nccl_version_text(nccl)


# -- which interpreter runs a command ------------------------------------------------

SHEBANG_BYTES = 512
PYTHON_NAME = re.compile(r"python[0-9.]*")
# pip's (distlib's) and uv's form for an interpreter path too long for a shebang line or
# with a space in it: `#!/bin/sh`, then `'''exec' "/path/bin/python" "$0" "$@"`
_SH_EXEC = re.compile(r"""'''exec' (?:"([^"]+)"|(\S+)) "\$0" "\$@\"""")


def _which(cmd: str, cwd: Path | None) -> str | None:
    if cwd is not None and "/" in cmd and not os.path.isabs(cmd):
        cmd = str(cwd / cmd)
    return shutil.which(cmd)


def script_interpreter(path: str) -> str | None:
    """The Python a script runs under, from its shebang line: ``#!/venv/bin/python3``,
    ``#!/usr/bin/env python3`` (looked up on PATH) or pip's ``#!/bin/sh`` + ``'''exec'``
    form.  Reads at most 512 bytes, of a regular file only; None where ``path`` is not
    such a script or its interpreter is not a python."""
    head = read_head(path, SHEBANG_BYTES)
    if head is None or not head.startswith(b"#!"):
        return None
    lines = head.decode("utf-8", "replace").splitlines()
    words = lines[0][2:].split()
    if not words:
        return None
    prog = words[0]
    name = Path(prog).name
    if name == "env":  # env [-S] [NAME=value...] python3 [args]
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        prog = rest[0] if rest else ""
    elif name in ("sh", "bash", "dash") and len(lines) > 1:
        m = _SH_EXEC.match(lines[1])
        prog = (m.group(1) or m.group(2)) if m else ""
    if not PYTHON_NAME.fullmatch(Path(prog).name):
        return None
    if "/" in prog and not os.path.isabs(prog):
        return None  # relative to wherever the script is run from: not known here
    return shutil.which(prog)


def interpreter_for(argv: Sequence[str], fallback: str, cwd: Path | None = None) -> str:
    """The Python that will run ``argv``: argv[0] when it is a python; the interpreter of
    argv[0]'s shebang line when argv[0] is a Python script (a launcher such as
    ``torchrun``, ``accelerate`` or ``deepspeed``, or ``./train.py``); else ``fallback``.
    ``cwd`` is where a relative ``./script`` is found (the run's working directory)."""
    if argv:
        exe = _which(argv[0], cwd)
        if exe and PYTHON_NAME.fullmatch(Path(argv[0]).name):
            return exe
        if exe:
            return script_interpreter(exe) or fallback
    return fallback


# -- launch topology -------------------------------------------------------------------

# Options of each launcher that take no value: any other option without '=' takes the
# next word, so the walk stops at the training script, whose own options are not read.
TORCHRUN_FLAGS = frozenset(
    {"standalone", "no_python", "run_path", "module", "m", "use_env", "virtual_local_rank"}
)
ACCELERATE_FLAGS = frozenset(
    {
        "cpu", "multi_gpu", "tpu", "ipex", "use_xpu", "use_deepspeed", "use_fsdp",
        "use_megatron_lm", "same_network", "module", "m", "no_python", "debug", "quiet",
        "q", "downcast_bf16", "enable_cpu_affinity", "tpu_use_cluster", "tpu_use_sudo",
    }
)  # fmt: skip
DEEPSPEED_FLAGS = frozenset(
    {
        "no_python", "no_local_rank", "no_ssh_check", "no_ssh", "force_multi", "save_pid",
        "elastic_training", "bind_cores_to_rank", "module", "m",
    }
)  # fmt: skip
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _launcher_options(words: Sequence[str], flags: frozenset[str]) -> dict[str, str | None]:
    """A launcher's own options (``--nproc-per-node 2`` -> ``{"nproc_per_node": "2"}``),
    up to the first word that is not one: the training script."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--" or not w.startswith("-") or w == "-":
            break
        name, eq, value = w.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if eq:
            out.setdefault(name, value)
        elif name in flags:
            out.setdefault(name, None)
        else:
            out.setdefault(name, words[i + 1] if i + 1 < len(words) else None)
            i += 1
        i += 1
    return out


def _python_module(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``python [options] -m MODULE args...`` -> ``(MODULE, args)``."""
    i = 1
    while i < len(argv):
        w = argv[i]
        if w == "-m" and i + 1 < len(argv):
            return argv[i + 1], list(argv[i + 2 :])
        if w.startswith("-m") and len(w) > 2:
            return w[2:], list(argv[i + 1 :])
        if w in ("-X", "-W"):  # options of python that take a value
            i += 2
            continue
        if not w.startswith("-") or w in ("-c", "-", "--"):
            return None
        i += 1
    return None


def _count(value: str | None) -> int | None:
    """A positive count; None for ``auto``, ``gpu``, a ``1:4`` range or anything else."""
    if value is None or not value.isdigit() or len(value) > 6 or int(value) < 1:
        return None
    return int(value)


def launch_topology(argv: Sequence[str]) -> tuple[int | None, int | None]:
    """``(processes per node, nodes)`` as a distributed launcher's command line says them;
    None for what it does not say (never a launcher's default, which may come from a
    config file or the host).

    - ``torchrun`` / ``python -m torch.distributed.run`` (or ``.launch``):
      ``--nproc-per-node``/``--nproc_per_node`` and ``--nnodes`` (``--standalone``: one)
    - ``accelerate launch``: ``--num_processes`` (the total over all machines) and
      ``--num_machines``; per node is known only with both
    - ``deepspeed``: ``--num_gpus`` (per node) and ``--num_nodes``
    """
    _, per_node, nodes = _launch(argv)
    return per_node, nodes


def launch_info(argv: Sequence[str]) -> dict[str, Any] | None:
    """The manifest's ``launch`` group: which distributed launcher started the command
    and the topology its command line says; None for a command started directly."""
    kind, per_node, nodes = _launch(argv)
    if not kind:
        return None
    return {"launcher": kind, "processes_per_node": per_node, "nodes": nodes}


def _launch(argv: Sequence[str]) -> tuple[str, int | None, int | None]:
    if not argv:
        return "", None, None
    prog = Path(argv[0]).name
    kind, words = "", list(argv[1:])
    if PYTHON_NAME.fullmatch(prog):
        mod = _python_module(argv)
        if mod is None:
            return "", None, None
        module, words = mod
        kind = {
            **dict.fromkeys(_TORCHRUN_MODULES, "torchrun"),
            "accelerate.commands.launch": "accelerate",
            "deepspeed.launcher.runner": "deepspeed",
        }.get(module, "")
    elif prog == "torchrun":
        kind = "torchrun"
    elif prog == "accelerate" and words[:1] == ["launch"]:
        kind, words = "accelerate", words[1:]
    elif prog == "deepspeed":
        kind = "deepspeed"
    if kind == "torchrun":
        o = _launcher_options(words, TORCHRUN_FLAGS)
        nodes = _count(o.get("nnodes"))
        if nodes is None and "standalone" in o and "nnodes" not in o:
            nodes = 1
        return kind, _count(o.get("nproc_per_node")), nodes
    if kind == "accelerate":
        o = _launcher_options(words, ACCELERATE_FLAGS)
        total, nodes = _count(o.get("num_processes")), _count(o.get("num_machines"))
        per_node = total // nodes if total and nodes and total % nodes == 0 else None
        return kind, per_node, nodes
    if kind == "deepspeed":
        o = _launcher_options(words, DEEPSPEED_FLAGS)
        return kind, _count(o.get("num_gpus")), _count(o.get("num_nodes"))
    return "", None, None


def os_description() -> str:
    with contextlib.suppress(OSError):
        info = platform.freedesktop_os_release()
        return info.get("PRETTY_NAME") or info.get("NAME") or platform.system()
    return f"{platform.system()} {platform.version()}"


def kernel() -> str:
    return platform.release()


def hostname() -> str:
    return socket.gethostname()


# -- hardware -------------------------------------------------------------------------


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


@dataclass
class GpuProbe:
    gpus: list[dict[str, object]] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None


def probe_gpus(nvidia_smi: str | None = None) -> GpuProbe:
    """GPUs through nvidia-smi when present; an empty list when there are none."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe:
        return GpuProbe()
    try:
        proc = subprocess.run(
            [
                exe,
                "--query-gpu=name,memory.total,compute_cap,uuid,driver_version",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return GpuProbe()
    out = GpuProbe()
    for line in proc.stdout.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5:
            continue
        name, mem, cc, uuid, driver = cols[:5]
        out.gpus.append(
            {
                "name": name,
                "memory_mb": int(mem) if mem.isdigit() else None,
                "compute_capability": cc or None,
                "uuid": uuid or None,
            }
        )
        out.driver_version = driver or None
    return out


def gpu_available() -> bool:
    return bool(probe_gpus().gpus)
