#!/usr/bin/env bash
# Install everything, build a demo store from real tiny training runs, open the TUI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${REPLAY_TUI_NO_DOCKER:-0}" != "1" ] && bash scripts/docker-env.sh >&2; then
  set -a; . "${REPLAY_TUI_ENV_DIR:-/var/lib/replay-tui-env}/train-image.env"; set +a
else
  echo "Docker environment unavailable: the demo uses the local backend" >&2
fi
exec .venv/bin/replay-tui demo "$@"
