#!/usr/bin/env bash
# Bring up Podman for replay-tui on a Debian bookworm host (root): Debian's podman
# (4.3), a containers.conf this host can run containers with, the local registry of
# scripts/docker-env.sh reachable without TLS, and the training image pulled BY DIGEST.
#
# Idempotent: a second run only checks that everything is there (about a second).
#
# Usage: scripts/podman-env.sh [--no-image]
#   --no-image   only install and configure podman.
#
# Environment:
#   REPLAY_TUI_ENV_DIR   state dir (default /var/lib/replay-tui-env); its
#                        train-image.env (written by scripts/docker-env.sh) names the
#                        digest to pull (REPLAY_TUI_TRAIN_DIGEST).
#
# Why the settings:
#   default_ulimits = []  this VM's root lacks CAP_SYS_RESOURCE: with podman's default
#                         ulimits every container fails with "error setting rlimit type
#                         6/7: operation not permitted".
#   runtime = "runc"      this VM's cgroups are hybrid (v1 and a v2 mount): crun
#                         refuses them, runc runs.
#   insecure registry     localhost:5000 speaks plain HTTP.
set -euo pipefail

STATE="${REPLAY_TUI_ENV_DIR:-/var/lib/replay-tui-env}"
REGISTRY_HOST="localhost:5000"
WANT_IMAGE=1

log() { printf '[podman-env] %s\n' "$*" >&2; }
die() { printf '[podman-env] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[podman-env] ERROR: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-image) WANT_IMAGE=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) die "unknown option: $1 (see --help)" ;;
  esac
  shift
done

[[ $(id -u) -eq 0 ]] || die "must run as root"
mkdir -p "$STATE"
exec 9>"$STATE/.podman.lock"
flock -w 1800 9 || die "another podman-env.sh run holds $STATE/.podman.lock"

# ---------------------------------------------------------------- 1. packages
if ! command -v podman >/dev/null; then
  log "installing podman"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update || die "apt-get update failed"
  apt-get install -y --no-install-recommends podman runc uidmap fuse-overlayfs \
    || die "apt-get install podman failed"
fi

# write_if_differs PATH: stdin to PATH unless it already holds exactly that.
write_if_differs() {
  local path=$1 tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 0
  fi
  mkdir -p "$(dirname "$path")"
  install -m 0644 "$tmp" "$path"
  rm -f "$tmp"
  log "wrote $path"
}

# ---------------------------------------------------------------- 2. config
write_if_differs /etc/containers/containers.conf <<'EOF'
# Written by replay-tui's scripts/podman-env.sh.
[containers]
# This host's root lacks CAP_SYS_RESOURCE: no rlimits are set on containers.
default_ulimits = []

[engine]
# This host's cgroups are hybrid (v1 controllers and a v2 mount), which crun refuses
# ("cgroups in hybrid mode not supported"); runc (Docker's) runs there.
runtime = "runc"
EOF

write_if_differs /etc/containers/registries.conf.d/50-replay-tui.conf <<EOF
# Written by replay-tui's scripts/podman-env.sh: the local registry speaks plain HTTP.
[[registry]]
location = "$REGISTRY_HOST"
insecure = true

[[registry]]
location = "127.0.0.1:5000"
insecure = true
EOF

podman version --format '{{.Client.Version}}' >/dev/null 2>&1 || die "podman does not answer: podman version failed"

if ((!WANT_IMAGE)); then
  log "podman ready (--no-image)"
  exit 0
fi

# ---------------------------------------------------------------- 3. image by digest
[[ -f "$STATE/train-image.env" ]] || die "$STATE/train-image.env is missing: run scripts/docker-env.sh first"
set -a; . "$STATE/train-image.env"; set +a
REF="${REPLAY_TUI_TRAIN_DIGEST:?train-image.env names no REPLAY_TUI_TRAIN_DIGEST}"
[[ "$REF" == *@sha256:* ]] || die "REPLAY_TUI_TRAIN_DIGEST=$REF is not a reference by digest"
if podman image exists "$REF" 2>/dev/null; then
  log "image $REF is in podman's store"
else
  log "pulling $REF"
  podman pull --quiet --tls-verify=false "$REF" >/dev/null || die "podman pull $REF failed"
fi
log "podman $(podman version --format '{{.Client.Version}}') ready"
echo "$REF"
