"""The one door for untrusted bytes (docs/architecture.md, "Trust boundaries").

Files whose path or content comes from outside the tool's own writing are opened here
and nowhere else: what a run or a container left in its output folder (metrics files,
handoff files, checkpoints), imported tracker folders and logs, bundle members, the
Slurm spool, key files.  Whoever wrote them may have left a link to ``/etc/shadow``, a
FIFO that never ends, a link to ``/dev/zero`` or a 3 GiB sparse file.

Every open here:

- starts from a **root** the caller names and trusts (a folder the tool made, or one the
  user named on the command line), opened as a folder;
- walks each component of the relative path with ``openat(..., O_NOFOLLOW)`` from the
  previous folder's descriptor, so a link anywhere below the root is refused, and a
  folder swapped for a link between a check and the open cannot redirect it (there is
  no check separate from the open);
- accepts a **regular file** only (checked with ``fstat`` on the open descriptor; the
  open is non-blocking, so a FIFO does not hang it);
- is **bounded**: each kind of file has a documented limit (:data:`LIMITS`); a file
  over it is refused with a message that names the kind, the path and the limit, and a
  read never takes more than the limit plus one byte, so a file that grows while read is
  caught too;
- refuses a **sparse** file (:func:`sparse_measure`): one whose length is mostly holes
  (``st_blocks * 512`` under half its size, confirmed with ``SEEK_DATA``/``SEEK_HOLE``),
  since reading or copying it costs its whole length, not what its writer paid for.

Refusals are :class:`Refused` (a ``BadInput``: exit 2), whose message says what was
wrong and where.  A reader that must go on without the file (an output that is listed
as refused, a gap) catches it and keeps the message.

A path the user typed is their own choice, links included (``--key ~/keys/k.pem`` may
be a link): :func:`read_named` follows it but still takes a regular file only, bounded.
Links *inside* a folder from elsewhere are never followed, except by
:func:`resolve_link_under`, which follows one link only to a regular file under a root
the user named (W&B's ``files/`` links to the files ``wandb.save`` kept).

Globs over a folder from elsewhere (a run's ``--artifact`` patterns) are matched by one
matcher, :func:`glob_match` (``**``: any number of folders, and as the last part every
file at every depth below), and walked by :func:`glob_under`, which never follows a link.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from replay_tui.errors import BadInput

KiB: Final = 1 << 10
MiB: Final = 1 << 20
GiB: Final = 1 << 30

LIMITS: Final[dict[str, int]] = {
    # what a run or a replay's container wrote
    "metrics file": 256 * MiB,
    "handoff file": 64 * MiB,
    "run output": 1 << 40,  # hashed and copied as a stream, never held in memory
    "run log": 1 * GiB,
    # imported tracker folders
    "W&B log": 2 * GiB,
    "tracker file": 64 * MiB,  # diff, requirements, output log, meta.yaml, params, tags
    "tracker metric file": 256 * MiB,  # one MLflow metric's history
    "saved file": 2 * GiB,  # a file a tracker saved, copied into objects/
    # evidence
    "bundle file": 256 * MiB,
    "key file": 64 * KiB,
    "trusted-keys file": 1 * MiB,
    "manifest file": 8 * MiB,  # storage.manifest.MAX_MANIFEST_BYTES: ingest takes no more
    # the Slurm spool (written by jobs)
    "spool file": 1 * MiB,
    "image probe": 16 * MiB,  # an image's Python, packages and OS, as a job probed them
    "job log": 1 * GiB,
    # what the user named when recording: config files in argv (bigger ones are hashed
    # as a stream, not read whole)
    "config file": 4 * MiB,
    # the owner file of a replay's scratch folder, in the shared temporary folder where
    # anyone can leave a folder of the same name
    "owner file": 64 * KiB,
}
"""The most bytes read of each kind of untrusted file.  A file over its limit is refused
with a message naming the limit; tests and docs read this table."""

_DIR_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW
)
_FILE_FLAGS: Final = (
    os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)


class Refused(BadInput):
    """An untrusted file was not read: what was wrong, and where."""


def limit_of(kind: str) -> int:
    return LIMITS[kind]


def _size(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def relative_parts(rel: str | PurePosixPath, kind: str, root: Path) -> tuple[str, ...]:
    """The components of ``rel``, refusing what could leave ``root``: an absolute path,
    ``..``, an empty path, NUL."""
    text = str(rel)
    if "\x00" in text:
        raise Refused(f"{kind} {text!r} under {root}: the path holds a NUL byte")
    p = PurePosixPath(text)
    if p.is_absolute():
        raise Refused(f"{kind} {text!r}: an absolute path, where one under {root} was expected")
    parts = tuple(x for x in p.parts if x not in ("", "."))
    if not parts:
        raise Refused(f"{kind} {text!r} under {root}: an empty path")
    if ".." in parts:
        raise Refused(f"{kind} {text!r}: '..' would leave {root}")
    return parts


def _open_root(root: Path, kind: str) -> int:
    """The root folder's descriptor.  The root is the caller's (a folder the tool made,
    or one the user named), so a link naming it is followed; it must be a folder."""
    try:
        return os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(f"{kind}: folder {root} does not exist") from None
    except NotADirectoryError:
        raise Refused(f"{kind}: {root} is not a folder") from None
    except OSError as e:
        raise Refused(f"{kind}: cannot open folder {root} ({e.strerror})") from None


def _why_not(dir_fd: int, name: str, shown: str, kind: str) -> str:
    """Why ``openat(dir_fd, name, O_NOFOLLOW)`` failed, in words."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return f"{kind} {shown} does not exist"
    except OSError as e:
        return f"{kind} {shown}: cannot inspect it ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return (
            f"{kind} {shown} is a symbolic link (-> {target[:200]}); links in files from"
            " elsewhere are never followed"
        )
    return f"{kind} {shown}: not a folder"


def _walk(root_fd: int, parts: tuple[str, ...], root: Path, kind: str) -> int:
    """The descriptor of the folder holding ``parts[-1]``, each step ``O_NOFOLLOW``."""
    fd = os.dup(root_fd)
    try:
        for i, part in enumerate(parts[:-1]):
            shown = root / "/".join(parts[: i + 1])
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                raise Refused(_why_not(fd, part, str(shown), kind)) from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _parent(
    root: Path, rel: str | PurePosixPath, kind: str, held: int | None = None
) -> tuple[tuple[str, ...], str, int]:
    """``rel``'s components, the path shown in messages, and a descriptor of the folder
    that holds its last component, walked from ``root`` (or ``held``, a descriptor of it
    the caller keeps open) without following a link."""
    parts = relative_parts(rel, kind, root)
    if held is not None:
        return parts, str(root / "/".join(parts)), _walk(held, parts, root, kind)
    root_fd = _open_root(root, kind)
    try:
        return parts, str(root / "/".join(parts)), _walk(root_fd, parts, root, kind)
    finally:
        os.close(root_fd)


@dataclass(frozen=True)
class Opened:
    """An untrusted regular file, open: its descriptor, size, and the path shown in
    messages.  Only valid inside :func:`open_under`'s ``with`` block."""

    fd: int
    size: int
    shown: str
    kind: str
    limit: int

    def read(self) -> bytes:
        """All its bytes, at most the limit (more is refused)."""
        return _read_fd(self.fd, self.limit, self.shown, self.kind)

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """Its bytes in chunks, stopping with :class:`Refused` past the limit."""
        total = 0
        while True:
            chunk = os.read(self.fd, size)
            if not chunk:
                return
            total += len(chunk)
            if total > self.limit:
                raise Refused(_over(self.kind, self.shown, self.limit, more=True))
            yield chunk


def _over(kind: str, shown: str, limit: int, *, more: bool = False, size: int = 0) -> str:
    has = "more than " + _size(limit) if more else _size(size)
    return f"{kind} {shown} is {has}; the limit for a {kind} is {_size(limit)}"


SPARSE_MIN: Final = 1 * MiB
"""A file shorter than this is never called sparse (a small file may be kept inline, with
no blocks of its own)."""
SPARSE_EXTENTS: Final = 4096
"""Data extents counted with ``SEEK_DATA``/``SEEK_HOLE`` at most; a file cut in more pieces
is judged by its blocks alone."""


def amount(n: int) -> str:
    """A byte count for people: ``8 GiB``, ``1.5 MiB``, ``700 bytes``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            text = f"{n / size:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    return f"{n} bytes"


def _data_bytes(fd: int, size: int) -> int | None:
    """How many of the file's ``size`` bytes lie in data extents, walked with
    ``SEEK_DATA``/``SEEK_HOLE``; None where the system cannot say or the file has more
    than :data:`SPARSE_EXTENTS` extents.  The descriptor's offset is back at 0 after."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        return None
    pos = data = 0
    try:
        for _ in range(SPARSE_EXTENTS):
            if pos >= size:
                return data
            try:
                start = os.lseek(fd, pos, seek_data)
            except OSError as e:
                if e.errno == errno.ENXIO:  # no data past pos: holes to the end
                    return data
                return None
            end = min(os.lseek(fd, start, seek_hole), size)
            data += max(0, end - start)
            pos = max(end, start + 1)
        return data if pos >= size else None
    except OSError:
        return None
    finally:
        with suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)


def sparse_measure(fd: int, st: os.stat_result | None = None) -> int | None:
    """The bytes really written of the regular file open as ``fd`` where it is *sparse*
    (mostly holes: under half its length on disk), else None.

    The blocks the file holds (``st_blocks * 512``) say it first; holes found with
    ``SEEK_DATA``/``SEEK_HOLE`` confirm it, so a file a filesystem merely compresses is
    not taken for sparse (its data has no holes).  Files under :data:`SPARSE_MIN` are
    never sparse."""
    st = os.fstat(fd) if st is None else st
    size = int(st.st_size)
    if size < SPARSE_MIN or not stat.S_ISREG(st.st_mode):
        return None
    on_disk = int(getattr(st, "st_blocks", size // 512 + 1)) * 512
    if on_disk >= size // 2:
        return None
    data = _data_bytes(fd, size)
    if data is None:
        return on_disk
    return data if data < size // 2 else None


SPARSE_HINT: Final = (
    "if its holes are really meant (zeros the file should hold), write it densely, or copy"
    " it with cp --sparse=never and use the copy"
)


def _sparse(kind: str, shown: str, size: int, written: int) -> str:
    return (
        f"{kind} {shown} is sparse: {amount(size)} long with only {amount(written)} written"
        " (the rest are holes); a sparse file is refused, since reading or copying it would"
        f" take all {amount(size)}"
    )


def _check_regular(fd: int, shown: str, kind: str, limit: int, *, sparse_ok: bool = False) -> int:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise Refused(f"{kind} {shown} is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{kind} {shown} is not a regular file (a device, FIFO or socket): refused")
    if st.st_size > limit:
        raise Refused(_over(kind, shown, limit, size=st.st_size))
    if not sparse_ok and (written := sparse_measure(fd, st)) is not None:
        raise Refused(_sparse(kind, shown, int(st.st_size), written), SPARSE_HINT)
    return int(st.st_size)


def _read_fd(fd: int, limit: int, shown: str, kind: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise Refused(_over(kind, shown, limit, more=True))
    return b"".join(chunks)


@contextmanager
def open_under(
    root: Path,
    rel: str | PurePosixPath,
    kind: str,
    *,
    limit: int | None = None,
    root_fd: int | None = None,
) -> Iterator[Opened]:
    """Open the regular file ``root/rel``, never through a link below ``root``.

    ``kind`` names the file in messages and picks its limit from :data:`LIMITS` (or
    ``limit``).  With ``root_fd`` (a descriptor of ``root`` the caller opened and holds)
    the walk starts there and ``root`` is only shown: a folder renamed or replaced since
    is not followed.  Raises :class:`Refused`."""
    cap = LIMITS[kind] if limit is None else limit
    parts, shown, dir_fd = _parent(root, rel, kind, root_fd)
    try:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except IsADirectoryError:
            raise Refused(f"{kind} {shown} is a folder, not a file") from None
        except OSError:
            raise Refused(_why_not(dir_fd, parts[-1], shown, kind)) from None
    finally:
        os.close(dir_fd)
    try:
        size = _check_regular(fd, shown, kind, cap)
        os.set_blocking(fd, True)
        yield Opened(fd, size, shown, kind, cap)
    finally:
        os.close(fd)


def read_under(
    root: Path,
    rel: str | PurePosixPath,
    kind: str,
    *,
    limit: int | None = None,
    root_fd: int | None = None,
) -> bytes:
    """The bytes of the regular file ``root/rel`` (see :func:`open_under`)."""
    with open_under(root, rel, kind, limit=limit, root_fd=root_fd) as f:
        return f.read()


def read_under_or_none(
    root: Path, rel: str | PurePosixPath, kind: str, *, limit: int | None = None
) -> bytes | None:
    """Like :func:`read_under`, but None when the file does not exist (any other
    refusal still raises)."""
    try:
        return read_under(root, rel, kind, limit=limit)
    except Refused as e:
        if str(e).endswith("does not exist"):
            return None
        raise


def exists_under(root: Path, rel: str | PurePosixPath) -> bool:
    """Whether ``root/rel`` is there as anything (a link included), looked at with
    ``lstat`` only: for deciding whether to try :func:`read_under` at all."""
    try:
        os.lstat(root / str(rel))
    except OSError:
        return False
    return True


def _open_named(path: Path, kind: str) -> int:
    """A descriptor of the file the user named (links followed), non-blocking."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise Refused(f"{kind} {path} does not exist") from None
    except IsADirectoryError:
        raise Refused(f"{kind} {path} is a folder, not a file") from None
    except OSError as e:
        raise Refused(f"{kind} {path}: cannot open it ({e.strerror})") from None


def read_named(path: Path, kind: str, *, limit: int | None = None) -> bytes:
    """A file the user named (a command-line argument): links in the path they typed
    are followed, as they chose it, but only a regular file is read, bounded."""
    cap = LIMITS[kind] if limit is None else limit
    fd = _open_named(path, kind)
    try:
        _check_regular(fd, str(path), kind, cap)
        os.set_blocking(fd, True)
        return _read_fd(fd, cap, str(path), kind)
    finally:
        os.close(fd)


def head_named(path: Path, kind: str, size: int) -> bytes:
    """The first ``size`` bytes of a file the user named, whatever its length (to tell
    what kind of file it is: the store's SQLite header).  As :func:`read_named`: links
    in the path are followed, only a regular file is read, and a FIFO never blocks."""
    fd = _open_named(path, kind)
    try:
        _check_regular(fd, str(path), kind, 1 << 62, sparse_ok=True)  # a header only
        os.set_blocking(fd, True)
        return os.read(fd, size)
    finally:
        os.close(fd)


def resolve_link_under(link_root: Path, rel: str, files_root: Path, kind: str) -> Path:
    """Where the link ``link_root/rel`` leads, allowed only to a regular file under
    ``files_root`` (a folder the user named).

    The walk to the link itself refuses links (``link_root/rel``'s folders are never
    followed); the link's target is resolved fully and must lie under ``files_root``
    (resolved too).  Returns the target's path *relative to* ``files_root`` joined to
    it, for :func:`open_under` from ``files_root``, which refuses any link on the way.
    """
    parts, shown, dir_fd = _parent(link_root, rel, kind)
    try:
        try:
            target = os.readlink(parts[-1], dir_fd=dir_fd)
        except OSError as e:
            raise Refused(f"{kind} {shown}: not a link ({e.strerror})") from None
    finally:
        os.close(dir_fd)
    base = link_root.joinpath(*parts[:-1])
    dest = Path(os.path.realpath(base / target))
    top = Path(os.path.realpath(files_root))
    if not dest.is_relative_to(top):
        raise Refused(
            f"{kind} {shown} is a link to {dest}, outside {top}: refused (only files under"
            " the folder named with --files-root are taken)"
        )
    return dest


def rel_under(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (both resolved by the caller), for open_under."""
    return path.relative_to(root).as_posix()


def private_folder(path: Path, what: str) -> Path:
    """``path`` as a folder only this user can enter: made 0700 when missing, tightened
    to 0700 when it is ours, refused (:class:`Refused`) when someone else owns it or
    others can write into it, since its content (an SDK, probes, job files) runs in or
    describes a replay.  The message says how to make a safe one."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        raise Refused(f"{what} {path}: cannot make or inspect it ({e.strerror})") from None
    how = (
        f"make one that is yours alone (mkdir -m 700 {path.parent}/$USER-spool) and name it"
        " with --slurm-spool or REPLAY_TUI_SLURM_SPOOL"
    )
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{what} {path} is not a folder", how)
    me = os.geteuid()
    if st.st_uid != me:
        raise Refused(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {me}): what it holds"
            " would run inside replay containers",
            how,
        )
    if st.st_mode & 0o022:
        raise Refused(
            f"{what} {path} can be written by others (mode {stat.S_IMODE(st.st_mode):04o}):"
            " what they leave there would run inside replay containers",
            how,
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def output_target(path: Path, what: str) -> Path:
    """``path`` as a file the tool may replace by writing beside it and renaming: missing,
    or a regular file.  A device, FIFO, socket, folder or link there is refused
    (:class:`Refused`): ``/dev/full`` must stay a device, not become our file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise Refused(f"{what} {path}: cannot inspect it ({e.strerror})") from None
    if stat.S_ISREG(st.st_mode):
        return path
    kind = (
        "a symbolic link"
        if stat.S_ISLNK(st.st_mode)
        else "a folder"
        if stat.S_ISDIR(st.st_mode)
        else "a device, FIFO or socket"
    )
    raise Refused(
        f"{what} {path} exists and is {kind}, not a regular file: it is not replaced",
        "name a new file, or a regular file to overwrite",
    )


def scan_tree(root: Path, kind_of: Callable[[PurePosixPath], str], what: str) -> int:
    """Check every entry under the folder ``root`` before a third-party reader (the MLflow
    client) opens files there itself: no link anywhere, nothing but folders and regular
    files, each file within the limit of its kind (``kind_of`` of its path under
    ``root``).  Walked with ``lstat`` from ``root`` down, links never followed; returns
    how many files were seen.  The reader opens the files after this check, so a writer
    racing the import could still swap one in between: the scan is for a folder at
    rest (what someone handed over), and every reader of ours opens through
    :func:`open_under` instead."""
    count = 0
    stack: list[tuple[Path, PurePosixPath]] = [(root, PurePosixPath())]
    try:
        st = os.lstat(root)
    except OSError as e:
        raise Refused(f"{what} {root}: cannot inspect it ({e.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{what} {root} is not a folder")
    while stack:
        folder, rel = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as e:
            raise Refused(f"{what} {folder}: cannot list it ({e.strerror})") from None
        for entry in entries:
            sub = rel / entry.name
            shown = root / sub
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    target = "?"
                raise Refused(
                    f"{what}: {shown} is a symbolic link (-> {target[:200]}); links in an"
                    " imported folder are never followed"
                )
            if stat.S_ISDIR(st.st_mode):
                stack.append((Path(entry.path), sub))
                continue
            kind = kind_of(sub)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{kind} {shown} is not a regular file (a device, FIFO or socket)")
            if st.st_size > LIMITS[kind]:
                raise Refused(_over(kind, str(shown), LIMITS[kind], size=st.st_size))
            if st.st_size >= SPARSE_MIN and st.st_blocks * 512 < st.st_size // 2:
                _refuse_sparse_at(Path(entry.path), kind, str(shown))
            count += 1
    return count


def _refuse_sparse_at(path: Path, kind: str, shown: str) -> None:
    """Refuse the file at ``path`` (a regular file, by ``lstat``) if it is sparse."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return  # gone or swapped since: the reader's own open says what it finds
    try:
        st = os.fstat(fd)
        if (written := sparse_measure(fd, st)) is not None:
            raise Refused(_sparse(kind, shown, int(st.st_size), written), SPARSE_HINT)
    finally:
        os.close(fd)


def under_any(path: Path, roots: Iterable[Path]) -> bool:
    """Whether ``path`` (resolved) lies under one of ``roots`` (resolved)."""
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(Path(os.path.realpath(r))) for r in roots)


# -- globs over a folder from elsewhere ------------------------------------------------


def glob_parts(pattern: str) -> tuple[str, ...] | None:
    """A glob's parts (``.`` and empty parts dropped), or None where it could name
    something outside the folder it is matched in: an absolute path, ``..``, NUL, or
    nothing at all."""
    if not pattern or "\x00" in pattern:
        return None
    p = PurePosixPath(pattern)
    if p.is_absolute():
        return None
    parts = tuple(x for x in p.parts if x not in ("", "."))
    if not parts or ".." in parts:
        return None
    return parts


def _has_magic(part: str) -> bool:
    return any(c in part for c in "*?[")


def _glob_row(parts: Sequence[str], pats: Sequence[str]) -> list[bool]:
    """``row[j]``: ``parts`` are matched by the first ``j`` parts of the glob; in time
    proportional to ``len(parts) * len(pats)`` whatever the glob (a replayed manifest's
    globs are untrusted)."""
    row = [True] + [False] * len(pats)
    for j, p in enumerate(pats, 1):
        row[j] = row[j - 1] and p == "**"
    for part in parts:
        nxt = [False] * (len(pats) + 1)
        for j, p in enumerate(pats, 1):
            if p == "**":
                nxt[j] = nxt[j - 1] or row[j]
            else:
                nxt[j] = row[j - 1] and fnmatch.fnmatchcase(part, p)
        row = nxt
    return row


def glob_match(parts: Sequence[str], pats: Sequence[str]) -> bool:
    """Whether a path (its ``parts``) is matched by the glob (its parts, from
    :func:`glob_parts`): each part by :func:`fnmatch.fnmatchcase` (``*`` within one name,
    a leading dot included), and ``**`` alone as a part by any number of names, none
    included, so ``out/**`` matches every file at every depth below ``out``.  The one
    matcher of ``--artifact`` globs: the collection after the run, the early reader, the
    stale snapshot and the gap that names a glob that matched nothing all use it."""
    return bool(pats) and _glob_row(parts, pats)[-1]


def glob_reaches(parts: Sequence[str], pats: Sequence[str]) -> bool:
    """Whether a file the glob matches can lie in the folder ``parts`` or below it."""
    if not pats:
        return False
    row = _glob_row(parts, pats)
    return any(row[:-1]) or (pats[-1] == "**" and row[-1])


Entry = Literal["folder", "file", "link", "special"]


@dataclass(frozen=True)
class Matched:
    """What a glob matched under a root: a regular file, or a link or special file (not
    followed, not read), by its path under the root."""

    rel: str
    what: Entry  # "file", "link" or "special" (a folder is never listed)
    target: str | None = None  # a link's, as readlink says it


def _open_folder_at(root_fd: int, parts: Sequence[str]) -> int | None:
    fd = os.dup(root_fd)
    for name in parts:
        try:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


def _kind_of(mode: int) -> Entry:
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "link"
    return "file" if stat.S_ISREG(mode) else "special"


def _entries(fd: int) -> list[tuple[str, Entry]]:
    """The names in the folder open as ``fd``, each with what it is (no link followed)."""
    out: list[tuple[str, Entry]] = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    if entry.is_symlink():
                        out.append((entry.name, "link"))
                    elif entry.is_dir(follow_symlinks=False):
                        out.append((entry.name, "folder"))
                    elif entry.is_file(follow_symlinks=False):
                        out.append((entry.name, "file"))
                    else:
                        out.append((entry.name, "special"))
                except OSError:
                    continue
    except OSError:
        pass
    return out


def glob_under(root: Path, pats: Sequence[str], *, folders_max: int = 100_000) -> list[Matched]:
    """Every entry under ``root`` that the glob (its parts, :func:`glob_parts`) matches as
    a file, sorted by path: regular files, and links and special files to refuse.  Walked
    one folder at a time from ``root`` with ``O_NOFOLLOW``: a link is never followed,
    whether the glob would match it as a file or as a folder on the way (a link where a
    folder of the glob stands is listed, as a link).  Folders the glob matches are not
    listed, nor is anything below a link.  At most ``folders_max`` folders are walked."""
    if not pats:
        return []
    try:
        root_fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except OSError:
        return []
    found: dict[str, Matched] = {}
    seen: set[tuple[tuple[str, ...], int]] = set()
    todo: list[tuple[tuple[str, ...], int]] = [((), 0)]
    opened = 0

    def keep(here: tuple[str, ...], name: str, what: Entry, fd: int) -> None:
        rel = "/".join((*here, name))
        if what == "folder":
            return
        target = None
        if what == "link":
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                target = "?"
        found[rel] = Matched(rel, what, target)

    try:
        while todo and opened < folders_max:
            here, i = todo.pop()
            if (here, i) in seen:
                continue
            seen.add((here, i))
            fd = _open_folder_at(root_fd, here)
            if fd is None:
                continue
            opened += 1
            try:
                part, last = pats[i], i == len(pats) - 1
                if part == "**" and not last:
                    todo.append((here, i + 1))  # ``**`` as no folder at all
                if _has_magic(part):
                    entries = _entries(fd)
                else:
                    try:
                        mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                        entries = [(part, _kind_of(mode))]
                    except OSError:
                        entries = []
                for name, what in entries:
                    if part == "**":
                        if what == "folder":
                            todo.append(((*here, name), i))  # one folder more
                        elif last:
                            keep(here, name, what, fd)
                    elif not fnmatch.fnmatchcase(name, part):
                        continue
                    elif last:
                        keep(here, name, what, fd)
                    elif what == "folder":
                        todo.append(((*here, name), i + 1))
                    elif what == "link":
                        keep(here, name, what, fd)  # where a folder should be: said, not followed
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return [found[k] for k in sorted(found)]
