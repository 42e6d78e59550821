#!/usr/bin/env bash
# The fast loop: every test that needs no container engine and no cluster (no Docker,
# Slurm, Podman or Apptainer) and trains no real model (the `slow` marker), on two
# workers.  `--with-slow` as the first argument adds the training tests (every test
# without an engine).  The other arguments go to pytest: a folder, -k, -x.
# The whole suite, engines included, is scripts/test.sh (what .ci/run runs).
set -euo pipefail
cd "$(dirname "$0")/.."
marks="not docker and not slurm and not podman and not apptainer"
if [ "${1:-}" = "--with-slow" ]; then
  shift
else
  marks="$marks and not slow"
fi
exec .venv/bin/pytest -q -p no:cacheprovider -n "${REPLAY_TUI_TEST_WORKERS:-2}" -m "$marks" "$@"
