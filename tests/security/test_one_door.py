"""The bypass scan of "One door for untrusted bytes" (docs/architecture.md, "Trust
boundaries").

Every file whose path or content comes from outside the tool's own writing is opened by
``replay_tui/door.py`` and nowhere else.  This test reads every module of
``replay_tui/`` and ``storage/`` (the AST, nothing is imported) and fails, with
``file:line``, on each call that opens or resolves a path by itself:

- ``read_text`` / ``read_bytes``, ``open(...)`` (the builtin, ``os.open``, ``Path.open``,
  any ``.open(``), ``readlink`` (``os.readlink``, ``Path.readlink``);
- ``.resolve(`` on a path (``Path.resolve`` follows every link it meets);
- ``shutil.copy*`` (``copy``, ``copy2``, ``copyfile``, ``copytree``, ...);

unless the call sits in a function of :data:`ALLOWED`, the short reviewed list of places
whose path is the tool's own (its store, its object store, its own logs, the bundled
example, ``/proc``) or a path the user typed, each with why.  ``store.resolve(ref)``
(``self.store``, ``obj.store``, ...) and ``.resolve(x)`` with a positional argument are
run-id lookups, not paths, and are not counted.

A new reader of outside files goes through ``replay_tui.door`` (``read_under``,
``open_under``, ``read_named``...), or, if its path really is the tool's own, into
:data:`ALLOWED` with its reason, in review.  An entry that no longer matches a call is
an error too, so the list stays as short as the code needs.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SCANNED = ("replay_tui", "storage")
DOOR = "replay_tui/door.py"

_READERS = frozenset({"read_text", "read_bytes", "open", "readlink"})

ALLOWED: dict[tuple[str, str], str] = {
    # -- the hashing engine: reviewed on its own (capture/hashing.py); every open checks
    #    the descriptor with fstat and streams, outputs are hashed with O_NOFOLLOW
    ("replay_tui.capture.hashing", "_digest_stream"): (
        "wraps a descriptor already opened and checked by its caller: no path"
    ),
    ("replay_tui.capture.hashing", "sha256_file"): (
        "hashes files the tool wrote (bundle members at export) or the user named"
        " (--data): streamed, never held in memory"
    ),
    ("replay_tui.capture.hashing", "_digest_file"): (
        "O_NOFOLLOW | O_NONBLOCK, regular files only (fstat before a byte is read)"
    ),
    ("replay_tui.capture.hashing", "_link_target"): (
        "a link inside a --data folder the user named: its target is only compared with"
        " the folder (refused outside it), and readlink feeds the message"
    ),
    ("replay_tui.capture.hashing", "_batches_by_fd"): (
        "opens a folder (O_DIRECTORY | O_NOFOLLOW) to list it: no file content"
    ),
    ("replay_tui.capture.probes", "read_head"): (
        "the first bytes of the run's own installed packages' version files, regular"
        " files only, non-blocking, bounded"
    ),
    ("replay_tui.capture.probes", "probe_git"): "the working folder the user ran record in",
    ("replay_tui.capture.probes", "cpu_model"): "/proc/cpuinfo: the kernel's",
    # -- torch's observed state: the hook the tool copies into its own handoff folder
    ("replay_tui.capture.frameworks.observe", "install"): (
        "reads the tool's own hook module (beside it in the package) to copy it into the"
        " handoff folder the tool made; the files the run writes back go through the door"
    ),
    ("replay_tui.capture.frameworks.torch_state_hook", "_observe"): (
        "runs inside the user's program: creates (O_EXCL) its own small JSON file in the"
        " folder the tool named; nothing read"
    ),
    # -- the launcher's parts (executor, outside, collect, artifacts, keep): its own log,
    #    and the folders the user named
    ("replay_tui.capture.executor", "_pump"): "writes the run's log file the tool made",
    ("replay_tui.capture.collect", "_log_tail"): "reads back the log file the tool wrote",
    ("replay_tui.capture.collect", "collect_outputs"): (
        "reads back the log file the tool wrote (the metrics file goes through the door)"
    ),
    ("replay_tui.capture.outside", "parse_data_arg"): "a --data path the user typed",
    ("replay_tui.capture.outside", "probe_outside"): "the working folder the user named",
    ("replay_tui.capture.artifacts", "artifact_entries"): (
        "resolves the run's working folder (the root); members are opened O_NOFOLLOW"
    ),
    ("replay_tui.capture.keep", "keep_artifacts"): (
        "resolves the run's working folder (the root); members are opened O_NOFOLLOW"
    ),
    ("replay_tui.capture.artifacts", "unsafe_member"): (
        "readlink of a link it refuses, for the message only: the link is never followed"
    ),
    ("replay_tui.capture.stale", "snapshot"): "resolves the run's working folder (the root)",
    ("replay_tui.capture.outputs", "EarlyOutputs.__init__"): (
        "resolves the run's working folder (the root) and the object store's own folder"
        " (never watched); members are opened by the door"
    ),
    ("replay_tui.capture.outputs", "EarlyOutputs._open_folder"): (
        "opens the run's folders only (O_DIRECTORY | O_NOFOLLOW, one name at a time from"
        " the root) to watch and list them; never reads a file"
    ),
    ("replay_tui.capture.outputs", "EarlyOutputs._digest_staged"): (
        "maps the tool's own staged copy in the object store (O_NOFOLLOW), never the run's file"
    ),
    ("replay_tui.capture.stale", "mark_stale"): "resolves the run's working folder (the root)",
    ("replay_tui.capture.argv_config", "_config_files"): (
        "a config path the user typed in argv, resolved to name it in the manifest; its"
        " bytes are read through door.read_named"
    ),
    # -- replays: folders the tool made, its own logs and lock files
    ("replay_tui.replay.checkout", "repo_lock"): (
        "the repository the user named, and the lock file the tool keeps in it"
    ),
    # -- the container runtimes' seam and Apptainer's SIF cache (the tool's own files)
    ("replay_tui.replay.backends.apptainer.runtime", "sha256_file"): (
        "hashes the SIF the tool converted into its own cache folder (checked to be the"
        " user's, not a link): O_NOFOLLOW, regular files only, streamed"
    ),
    ("replay_tui.replay.backends.apptainer.runtime", "ApptainerRuntime.ensure_sif"): (
        "the lock file the tool keeps beside its own SIF (O_NOFOLLOW, 0600): no content read"
    ),
    ("replay_tui.replay.backends.apptainer.runtime", "ApptainerRuntime.convert"): (
        "appends a line to the record of conversions the tool keeps in its own SIF cache"
        " (O_APPEND | O_NOFOLLOW, 0600, under the image's lock): nothing read"
    ),
    ("replay_tui.replay.backends.docker.walls", "copy_holes"): (
        "copies a file a run wrote from the tool's own tmpfs into the tool's checkout:"
        " O_NOFOLLOW | O_NONBLOCK, regular files only (fstat), holes kept as holes (the"
        " door refuses a sparse output when it reads it)"
    ),
    # -- the sandbox walls (docker/walls.py): the tool's own tmpfs folders and checkout
    ("replay_tui.replay.backends.docker.walls", "host_memory_bytes"): "/proc/meminfo: the kernel's",
    ("replay_tui.replay.backends.docker.walls", "our_mounts"): (
        "/proc/self/mountinfo: the kernel's list of mounts, to find the tool's own tmpfs"
    ),
    ("replay_tui.replay.backends.docker.walls", "BoundedFolders.bound"): (
        "moves a checkout folder the tool made into the tmpfs it mounts over it and back:"
        " links copied as links (symlinks=True), never followed; a FIFO or device is"
        " refused by shutil (SpecialFileError); the tmpfs bounds the bytes"
    ),
    ("replay_tui.replay.backends.docker.walls", "BoundedFolders.close"): (
        "copies the tool's own tmpfs back into the checkout the tool made: links as"
        " links, special files refused by shutil; what is read of the files later goes"
        " through the door (outputs are hashed there)"
    ),
    ("replay_tui.replay.backends.docker.walls", "sync_into"): (
        "copies what the run changed from the tool's tmpfs into the tool's checkout: a"
        " link is read as a link (readlink) and recreated, never followed"
        " (follow_symlinks=False); the bytes are bounded by the tmpfs"
    ),
    ("replay_tui.replay.backends.docker.walls", "outermost"): (
        "resolves the checkout folders the tool made, to find the outermost to bound"
    ),
    ("replay_tui.replay.backends.docker.engine", "<module>"): (
        "this package's own folder (the SDK mount)"
    ),
    ("replay_tui.replay.backends.docker.engine", "_empty_file"): (
        "creates its own empty file: O_CREAT | O_EXCL | O_NOFOLLOW, then checks it is ours"
    ),
    ("replay_tui.replay.backends.docker.engine", "pump_lines"): (
        "writes the replay's log file the tool made (every runtime's log pump)"
    ),
    ("replay_tui.replay.backends.docker.engine", "container_recorder"): (
        "the working folder and --data paths the user named"
    ),
    ("replay_tui.replay.runner", "stage_place"): (
        "the checkout the tool made and the data locations the user named"
    ),
    ("replay_tui.replay.backends.slurm.spool", "spool_dir"): (
        "the spool folder the user named (then door.private_folder)"
    ),
    ("replay_tui.replay.backends.slurm.spool", "sdk_copy"): (
        "copies this package's own .py files into the job's owner-only folder"
    ),
    ("replay_tui.replay.backends.slurm.spool", "_own_folder"): (
        "opens a spool folder it made or checks: O_DIRECTORY | O_NOFOLLOW, then fstat:"
        " refused unless this user's alone"
    ),
    ("replay_tui.replay.backends.slurm.spool", "write_new"): (
        "creates the job's own files from the job folder's descriptor: O_CREAT | O_EXCL"
        " | O_NOFOLLOW, owner-only"
    ),
    ("replay_tui.replay.backends.slurm.engine", "_Tail.__init__"): (
        "writes the replay's log file the tool made"
    ),
    ("replay_tui.replay.debris", "_start_time"): "/proc/PID/stat: the kernel's",
    # -- evidence, importers, the demo, the SDK
    ("replay_tui.evidence.modelsig", "export_model_files"): (
        "creates each model file (O_EXCL, O_NOFOLLOW) in the new folder the user named;"
        " the store's copies are read through the door"
    ),
    ("replay_tui.evidence.keys", "_write_new"): (
        "creates a new key file: O_CREAT | O_EXCL, mode 0600 from the first byte"
    ),
    ("replay_tui.importers.mlflow", "_store_roots"): "the sqlite:/// file the user named",
    ("replay_tui.importers.mlflow", "_check_uri"): "the tracking folder the user named",
    ("replay_tui.importers.wandb", "WandbImporter.discover"): (
        "the run folders and --files-root the user named"
    ),
    ("replay_tui.checkpoints.formats", "detect_format"): (
        "the first 9 bytes of a checkpoint its caller checked: a kept object, a file the"
        " user named, or a run output just hashed as a regular file (O_NOFOLLOW); to move"
        " to the door with the tensor readers"
    ),
    ("replay_tui.cli.demo_store", "<module>"): "this package's own folder (the bundled example)",
    ("replay_tui.cli.demo_store", "make_demo_repo"): "copies the bundled example program",
    ("replay_tui.cli.demo_store", "build_demo"): "reads the bundled example program",
    ("replay_tui.sdk", "_sha256_file"): (
        "runs inside the user's training program: hashes files that program names"
    ),
    ("replay_tui.sdk", "Run.standalone_manifest"): (
        "runs inside the user's training program: the artifacts it names"
    ),
    ("replay_tui.sdk", "_git_state"): "runs inside the user's program: its working folder",
    # -- storage (may not import replay_tui): its own database and object store
    ("storage.objects", "ObjectStore.put"): (
        "the caller's file, O_NOFOLLOW | O_NONBLOCK, refused unless regular, re-hashed"
    ),
    ("storage.objects", "ObjectStore.stage_fd"): (
        "writes its own object (O_NOFOLLOW, 0600) from a descriptor the door opened"
    ),
    ("storage.objects", "ObjectStore.verify"): "re-hashes its own object",
}
"""(module, function) -> why the path opened there is the tool's own (or the user's
choice), reviewed.  A function is ``Class.method`` inside a class, ``<module>`` at the top
level."""


@dataclass(frozen=True)
class Bypass:
    file: str  # relative to the scanned root
    line: int
    module: str
    function: str
    call: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.call} (in {self.module} {self.function})"


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _receiver_name(node: ast.expr) -> str:
    """The last name of a call's receiver: ``store`` for ``self.store``, ``obj.store``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class _Scanner(ast.NodeVisitor):
    def __init__(self, file: str, module: str) -> None:
        self.file, self.module = file, module
        self.scope: list[str] = []
        self.found: list[Bypass] = []
        self.shutil_names = {"shutil"}  # import shutil [as x]
        self.copy_names: set[str] = set()  # from shutil import copyfile [as x]
        self.os_names = {"os"}
        self.open_names = {"open"}  # the builtin; from os import open [as x]
        self.readlink_names: set[str] = set()

    # scopes
    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    def _function(self) -> str:
        return ".".join(self.scope) or "<module>"

    # imports that rename what is looked for
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name == "shutil":
                self.shutil_names.add(a.asname or a.name)
            if a.name == "os":
                self.os_names.add(a.asname or a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            name = a.asname or a.name
            if node.module == "shutil" and a.name.startswith("copy"):
                self.copy_names.add(name)
            if node.module in ("os", "io") and a.name == "open":
                self.open_names.add(name)
            if node.module == "os" and a.name == "readlink":
                self.readlink_names.add(name)

    def _flagged(self, node: ast.Call) -> bool:
        f = node.func
        if isinstance(f, ast.Name):
            return f.id in self.open_names | self.copy_names | self.readlink_names
        if not isinstance(f, ast.Attribute):
            return False
        if f.attr in _READERS:
            return True
        if f.attr.startswith("copy"):
            return isinstance(f.value, ast.Name) and f.value.id in self.shutil_names
        if f.attr == "resolve":
            if _receiver_name(f.value) == "store":
                return False  # RunStore.resolve(ref): a run id lookup
            # Path.resolve takes only ``strict``: an argument is a lookup by reference
            return not any(not isinstance(a, ast.Constant) for a in node.args)
        return False

    def visit_Call(self, node: ast.Call) -> None:
        if self._flagged(node):
            self.found.append(
                Bypass(self.file, node.lineno, self.module, self._function(), ast.unparse(node))
            )
        self.generic_visit(node)


def scan_source(source: str, file: str, module: str) -> list[Bypass]:
    """Every call in ``source`` that opens or resolves a path by itself."""
    s = _Scanner(file, module)
    s.visit(ast.parse(source, filename=file))
    return s.found


def scan_tree(root: Path) -> list[Bypass]:
    """:func:`scan_source` of every module under ``root``'s scanned packages, but the door."""
    found: list[Bypass] = []
    for package in SCANNED:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.as_posix() == DOOR:
                continue
            found += scan_source(path.read_text("utf-8"), rel.as_posix(), _module_name(rel))
    return found


def bypasses(root: Path) -> list[Bypass]:
    """The calls under ``root`` that :data:`ALLOWED` does not cover."""
    return [b for b in scan_tree(root) if (b.module, b.function) not in ALLOWED]


def test_every_untrusted_read_goes_through_the_door() -> None:
    found = bypasses(ROOT)
    assert not found, (
        "files opened outside replay_tui/door.py (use replay_tui.door, or add the"
        " function to ALLOWED with why its path is the tool's own):\n" + "\n".join(map(str, found))
    )


def test_every_allowed_entry_is_still_needed() -> None:
    used = {(b.module, b.function) for b in scan_tree(ROOT)}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED entries that match no call any more (remove them): {stale}"


def test_the_door_itself_exists_and_is_the_one_skipped() -> None:
    assert (ROOT / DOOR).is_file()
    assert scan_source((ROOT / DOOR).read_text("utf-8"), DOOR, "replay_tui.door")  # it opens


def test_the_scan_catches_each_kind_of_bypass() -> None:
    source = """\
import os, shutil as sh
from pathlib import Path
from shutil import copy2
from os import readlink as rl

def sneaky(x, store, obj):
    Path(x).read_text()
    Path(x).read_bytes()
    open(x)
    os.open(x, os.O_RDONLY)
    Path(x).open("rb")
    os.readlink(x)
    rl(x)
    Path(x).resolve()
    Path(x).resolve(strict=True)
    sh.copyfile(x, "y")
    copy2(x, "y")
    store.resolve(x)
    obj.store.resolve(x)
    x.copy()
    x.resolve(x)

class K:
    def m(self, x):
        return Path(x).read_text()
"""
    found = scan_source(source, "replay_tui/fake.py", "replay_tui.fake")
    lines = [b.line for b in found]
    assert lines == [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 25], [str(b) for b in found]
    assert {b.function for b in found} == {"sneaky", "K.m"}
    assert str(found[0]) == "replay_tui/fake.py:7: Path(x).read_text() (in replay_tui.fake sneaky)"


def test_a_new_read_text_in_a_module_fails_the_scan(tmp_path: Path) -> None:
    """A temp copy of the packages with one ``Path(x).read_text()`` added to a module
    that has no allowed call: the scan names exactly that file and line."""
    for package in SCANNED:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert bypasses(tmp_path) == bypasses(ROOT)  # the copy scans as the tree does
    target = tmp_path / "replay_tui" / "gaps" / "run_rules.py"
    before = target.read_text("utf-8")
    target.write_text(
        before + "\n\ndef _peek(x: str) -> str:\n    return Path(x).read_text()\n", "utf-8"
    )
    line = len(before.splitlines()) + 4
    new = [b for b in bypasses(tmp_path) if b.file == "replay_tui/gaps/run_rules.py"]
    assert [str(b) for b in new] == [
        f"replay_tui/gaps/run_rules.py:{line}: Path(x).read_text()"
        " (in replay_tui.gaps.run_rules _peek)"
    ]
    # and inside an allowed module, a function not on the list is caught just the same
    slurm = tmp_path / "replay_tui" / "replay" / "backends" / "slurm" / "engine.py"
    slurm.write_text(slurm.read_text("utf-8") + "\n\ndef _x(p):\n    return p.read_bytes()\n")
    assert any(b.function == "_x" for b in bypasses(tmp_path))
