#!/usr/bin/env bash
# Create .venv and install replay-tui with its pinned dependencies (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.replay-tui-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >&2
  # torch==2.13.0 is pinned: a newer or unpinned torch drags a multi-GB CUDA build.
  .venv/bin/python -m pip install -q -e '.[dev]' >&2
  echo "$want" > "$stamp"
else
  .venv/bin/python -m pip install -q --no-deps -e . >&2
fi
