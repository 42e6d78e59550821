"""The configuration an uninstrumented command carries on its command line.

A program that takes its hyperparameters as arguments (argparse ``--lr=3e-4`` or
``--lr 3e-4``, flags such as ``--no-compile``, Hydra overrides ``trainer.max_epochs=5``,
fire-style ``--epochs 3``, positional arguments, a config file) says its configuration
in argv.  ``parse_argv`` reads it back without running anything:

- keys are kept as given (leading dashes and Hydra's ``+``/``++`` removed; ``no-compile``
  stays ``no-compile``: whether it means ``compile=False`` is the program's business);
- a value is typed only where that is unambiguous: an integer, a finite float,
  ``true``/``false``, ``null``/``None``; anything else stays the string given, and every
  raw string is kept beside the typed value;
- a flag without a value is ``true``; a key given twice keeps every value, in order;
- positional arguments are kept in order under ``_positional``;
- a config file named anywhere in argv (``.yaml .yml .json .toml .py .cfg .ini``) that
  exists is hashed; YAML, JSON and TOML are parsed (safely) and their top-level keys
  merged under the command-line values; a ``.py`` file is hashed and never executed.

``--key value`` and ``--flag positional`` look the same in argv: the token after an
option is its value unless it is itself an option.  The raw strings are kept so a
reader can tell.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from replay_tui.capture.hashing import sha256_regular_file
from replay_tui.door import LIMITS, Refused, open_under, read_named, read_under
from storage.canonical import written_as_big_integer

POSITIONAL_KEY = "_positional"
CONFIG_SUFFIXES: dict[str, str] = {
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".toml": "toml",
    ".py": "python",
    ".cfg": "cfg",
    ".ini": "ini",
}
PARSED_FORMATS = ("yaml", "json", "toml")
MAX_PARSE_BYTES = LIMITS["config file"]  # 4 MiB: bigger config files are hashed, not parsed
MAX_BLOB_BYTES = 1024 * 1024  # config files up to this size are kept in the store
MAX_KEY = 256
MAX_VALUE = 4096
MAX_LONG_VALUE = 64 * 1024
MAX_SAFE_INT = 2**53 - 1

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?(\.exe)?")
_INT = re.compile(r"[+-]?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[+-]?((0|[1-9]\d*)(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_NUMBER_LIKE = re.compile(r"-(\d|\.\d)")
_HYDRA = re.compile(r"(\+{0,2}|~)([A-Za-z_][\w.\-/@]*)=(.*)", re.DOTALL)
# interpreter options that take a separate value (python -W ignore, -X dev)
_PY_OPTS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
_LAUNCHERS = {"torchrun", "deepspeed", "accelerate", "uv", "poetry", "pipenv", "hatch"}


@dataclass
class ConfigFile:
    """A config file named in argv, pinned by its content."""

    path: str  # as named in argv
    abs_path: Path
    sha256: str
    size_bytes: int
    format: str
    parsed: bool = False
    in_repo: str | None = None  # its path inside the recording repository
    problem: str | None = None  # why it was not parsed, when it could have been

    def info(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "format": self.format,
            "parsed": self.parsed,
            "in_repo": self.in_repo,
        }


@dataclass
class ArgvConfig:
    """What argv says about the configuration."""

    program: list[str] = field(default_factory=list)  # interpreter/launcher and script
    values: dict[str, Any] = field(default_factory=dict)  # typed, argv only
    raw: dict[str, Any] = field(default_factory=dict)  # key -> str | list[str] | None
    positional: list[str] = field(default_factory=list)
    files: list[ConfigFile] = field(default_factory=list)
    file_values: dict[str, Any] = field(default_factory=dict)  # merged from parsed files

    @property
    def empty(self) -> bool:
        return not (self.values or self.positional or self.files)

    def config(self) -> dict[str, Any]:
        """The effective configuration: file keys, then argv keys over them."""
        out: dict[str, Any] = dict(self.file_values)
        out.update(self.values)
        if self.positional:
            out[POSITIONAL_KEY] = [typed(p) for p in self.positional]
        return out

    def source_info(self, source: str) -> dict[str, Any]:
        """The manifest's ``config_source`` group; ``source`` says what ``config`` holds."""
        raw: dict[str, Any] = dict(self.raw)
        return {
            "source": source,
            "argv": self.config() if source != "argv" else None,
            "raw": raw,
            "positional": list(self.positional),
            "files": [f.info() for f in self.files],
        }

    def blobs(self) -> dict[str, tuple[str, bytes]]:
        """Small config files' bytes, to keep in the store beside the manifest."""
        out: dict[str, tuple[str, bytes]] = {}
        for f in self.files:
            if f.size_bytes <= MAX_BLOB_BYTES:
                try:  # the user's file, through the door: a regular file only, bounded
                    data = read_named(f.abs_path, "config file", limit=MAX_BLOB_BYTES)
                except Refused:
                    continue
                if hashlib.sha256(data).hexdigest() == f.sha256:
                    out[f.sha256] = ("config", data)
        return out


def reads_back(f: float) -> bool:
    """A float a manifest's config can hold: finite, and not a whole number between
    2**53 and 1e21 (canonical JSON writes those as integers beyond the exact range)."""
    return math.isfinite(f) and not written_as_big_integer(f)


def typed(raw: str) -> Any:
    """``raw`` as int, float, bool or None where that reading is the only one."""
    if raw in ("true", "True"):
        return True
    if raw in ("false", "False"):
        return False
    if raw in ("null", "None"):
        return None
    if _INT.fullmatch(raw):
        v = int(raw)
        return v if abs(v) <= MAX_SAFE_INT else raw
    if _FLOAT.fullmatch(raw):
        f = float(raw)
        return f if reads_back(f) else raw
    return raw


def split_program(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the interpreter/launcher and script, the script's own arguments)."""
    args = list(argv)
    if not args:
        return [], []
    head = os.path.basename(args[0])
    if _PYTHON.fullmatch(head):
        i = 1
        while i < len(args):
            a = args[i]
            if a == "-m" and i + 1 < len(args):
                prog, rest = args[: i + 2], args[i + 2 :]
                if args[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
                    sub_prog, sub_rest = _after_script(rest)
                    return prog + sub_prog, sub_rest
                return prog, rest
            if a == "-c":
                return args, []  # inline code: no arguments of a script
            if a in _PY_OPTS_WITH_VALUE:
                i += 2
                continue
            if a.startswith("-") and a != "-":
                i += 1
                continue
            return args[: i + 1], args[i + 1 :]
        return args, []
    if head in _LAUNCHERS:
        prog, rest = _after_script(args[1:])
        return [args[0], *prog], rest
    return args[:1], args[1:]


def _after_script(args: list[str]) -> tuple[list[str], list[str]]:
    """Launcher options up to and including the first ``.py`` script (or ``-m module``)."""
    for i, a in enumerate(args):
        if a.endswith(".py") and not a.startswith("-"):
            return args[: i + 1], args[i + 1 :]
        if a == "-m" and i + 1 < len(args):
            return args[: i + 2], args[i + 2 :]
    return [], args  # no script found: read everything as arguments


def _is_option(tok: str) -> bool:
    return tok.startswith("-") and tok not in ("-", "--") and not _NUMBER_LIKE.match(tok)


def _clip_key(key: str) -> str | None:
    key = key.strip()
    if not key or len(key) > MAX_KEY or any(ord(c) < 0x20 or c == "\x7f" for c in key):
        return None
    return key


def parse_argv(
    argv: Sequence[str],
    cwd: Path | None = None,
    repo_root: Path | None = None,
    *,
    confine: bool = False,
) -> ArgvConfig:
    """Read the configuration ``argv`` carries; with ``cwd``, hash (and parse) config files.

    At record time argv is the user's own command line: a config file it names is theirs,
    wherever it lies (read with ``door.read_named``).  A replay's argv comes from a
    manifest (maybe someone else's): with ``confine``, a config file is taken only inside
    ``repo_root`` (the replay's checkout), opened through the door from there (no link
    followed, a regular file only, bounded); an absolute path, ``~`` or a path leaving the
    checkout names a file of this host and is never read.
    """
    program, args = split_program(argv)
    out = ArgvConfig(program=program)
    file_tokens: list[str] = []

    def put(key: str, raw: str | None) -> None:
        k = _clip_key(key)
        if k is None or k == POSITIONAL_KEY:
            out.positional.append(key if raw is None else f"{key}={raw}")
            return
        if raw is not None:
            raw = raw[:MAX_VALUE]
        value: Any = True if raw is None else typed(raw)
        if k in out.values:
            prev_raw, prev_val = out.raw[k], out.values[k]
            out.raw[k] = [*(prev_raw if isinstance(prev_raw, list) else [prev_raw]), raw]
            out.values[k] = [*(prev_val if isinstance(prev_val, list) else [prev_val]), value]
        else:
            out.raw[k] = raw
            out.values[k] = value
        if raw is not None:
            file_tokens.append(raw)

    i = 0
    only_positional = False
    while i < len(args):
        tok = args[i]
        i += 1
        if only_positional:
            out.positional.append(tok[:MAX_VALUE])
            file_tokens.append(tok)
            continue
        if tok == "--":
            only_positional = True
            continue
        if _is_option(tok):
            name = tok.lstrip("-")
            if "=" in name:
                key, _, raw = name.partition("=")
                put(key, raw)
            elif i < len(args) and not _is_option(args[i]) and args[i] != "--":
                put(name, args[i])
                i += 1
            else:
                put(name, None)
            continue
        m = _HYDRA.fullmatch(tok)
        if m is not None and not _looks_like_path(m.group(2)):
            prefix, key, raw = m.groups()
            put(("~" + key) if prefix == "~" else key, raw)
            continue
        out.positional.append(tok[:MAX_VALUE])
        file_tokens.append(tok)
    if cwd is not None and confine:
        if repo_root is not None:
            _confined_config_files(out, file_tokens, cwd, repo_root)
    elif cwd is not None:
        _config_files(out, file_tokens, cwd, repo_root)
    return out


def _looks_like_path(key: str) -> bool:
    return key.endswith(tuple(CONFIG_SUFFIXES)) and "/" in key


def _config_files(
    out: ArgvConfig, tokens: Sequence[str], cwd: Path, repo_root: Path | None
) -> None:
    seen: set[Path] = set()
    for tok in tokens:
        suffix = Path(tok).suffix.lower()
        fmt = CONFIG_SUFFIXES.get(suffix)
        if fmt is None or "\x00" in tok or len(tok) > MAX_VALUE:
            continue
        p = Path(os.path.expanduser(tok))
        p = p if p.is_absolute() else cwd / p
        try:
            if not p.is_file():
                continue
            p = p.resolve()
        except OSError:
            continue
        if p in seen:
            continue
        seen.add(p)
        try:  # a regular file only (never a FIFO swapped in after the check above)
            digest, size = sha256_regular_file(p)
        except (OSError, ValueError, RuntimeError):
            continue
        in_repo = None
        if repo_root is not None and p.is_relative_to(repo_root.resolve()):
            in_repo = p.relative_to(repo_root.resolve()).as_posix()
        cf = ConfigFile(tok, p, digest, size, fmt, in_repo=in_repo)
        _merge_file(out, cf, partial(read_named, p, "config file"))
        out.files.append(cf)


def _confined_config_files(
    out: ArgvConfig, tokens: Sequence[str], cwd: Path, repo_root: Path
) -> None:
    """:func:`_config_files` for a replay: only files inside ``repo_root``, each opened
    through the door from there (``parse_argv``'s ``confine``)."""
    top = Path(os.path.realpath(repo_root))
    here = os.path.relpath(os.path.realpath(cwd), top)
    seen: set[str] = set()
    for tok in tokens:
        fmt = CONFIG_SUFFIXES.get(Path(tok).suffix.lower())
        if fmt is None or "\x00" in tok or len(tok) > MAX_VALUE or os.path.isabs(tok):
            continue
        rel = os.path.normpath(os.path.join(here, tok))
        if rel == ".." or rel.startswith("../") or os.path.isabs(rel) or rel in seen:
            continue  # it would leave the checkout: a file of this host, never read
        seen.add(rel)
        try:
            with open_under(top, rel, "config file", limit=LIMITS["run output"]) as f:
                h = hashlib.sha256()
                for chunk in f.chunks():
                    h.update(chunk)
                size = f.size
        except (Refused, OSError):
            continue
        cf = ConfigFile(tok, top / rel, h.hexdigest(), size, fmt, in_repo=rel)
        _merge_file(out, cf, partial(read_under, top, rel, "config file"))
        out.files.append(cf)


def _merge_file(out: ArgvConfig, cf: ConfigFile, read: Callable[[], bytes]) -> None:
    """Parse ``cf`` (its bytes from ``read``) and merge its top-level keys into ``out``."""
    if cf.format not in PARSED_FORMATS:
        return
    if cf.size_bytes > MAX_PARSE_BYTES:
        cf.problem = f"over {MAX_PARSE_BYTES} bytes: hashed, not parsed"
        return
    try:
        data = _parse(read(), cf.format)
    except Exception as e:  # any parser error: the file is still pinned by hash
        cf.problem = f"not parsed: {str(e).splitlines()[0][:160] if str(e) else e}"
        return
    if isinstance(data, Mapping):
        for k, v in data.items():
            key = _clip_key(str(k))
            if key is not None:
                out.file_values[key] = jsonable(v)
        cf.parsed = True
    else:
        cf.problem = "not a mapping at the top level: hashed, not merged"


def _parse(text: bytes, fmt: str) -> Any:
    if fmt == "json":
        return json.loads(text.decode("utf-8"))
    if fmt == "toml":
        return tomllib.loads(text.decode("utf-8"))
    yaml = importlib.import_module("yaml")
    return yaml.safe_load(text.decode("utf-8"))


def jsonable(value: Any, depth: int = 0) -> Any:
    """A parsed config value as manifest JSON: dates as ISO text, odd numbers as text."""
    if depth > 30:
        return str(value)[:MAX_VALUE]
    if isinstance(value, str):
        return value[:MAX_LONG_VALUE]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) <= MAX_SAFE_INT else str(value)
    if isinstance(value, float):
        return value if reads_back(value) else str(value)
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = _clip_key(str(k))
            if key is not None:
                out[key] = jsonable(v, depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return str(value)[:MAX_VALUE]


def merge_config(
    sdk_config: Mapping[str, Any], parsed: ArgvConfig | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the manifest's ``config``, its ``config_source`` group or None).

    The SDK's explicit config wins; the argv view is then kept apart in ``config_source``.
    """
    if parsed is None or parsed.empty:
        return dict(sdk_config), None
    source = "sdk" if sdk_config else "argv"
    info = parsed.source_info(source)
    config = dict(sdk_config) if sdk_config else parsed.config()
    try:  # never lose a finished run over what argv held: an odd value drops the view
        from storage.manifest import ConfigSourceInfo, _check_config, config_hash

        _check_config(config, "config")
        if info["argv"] is not None:
            _check_config(info["argv"], "config_source.argv")
        ConfigSourceInfo.model_validate(info, strict=True)
        config_hash(config)
    except Exception:
        return dict(sdk_config), None
    return config, info
