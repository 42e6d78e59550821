#!/usr/bin/env bash
# Create .venv and install replay-tui with its pinned dependencies (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ "${1:-}" = "--test-deps" ]; then
  # System tools the tests drive for real: git repos, the TUI in tmux, the HTML report
  # in headless Chromium.
  need=()
  command -v git >/dev/null || need+=(git)
  command -v tmux >/dev/null || need+=(tmux)
  command -v chromium >/dev/null || need+=(chromium)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  fi
fi
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
