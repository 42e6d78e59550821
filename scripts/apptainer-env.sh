#!/usr/bin/env bash
# Bring up Apptainer 1.4.5 for replay-tui on a Debian bookworm host (root).
#
# Apptainer is only in Debian's unstable suite (sid), whose binaries need glibc 2.38;
# bookworm has 2.36.  So: sid's apptainer, libc6, libseccomp2 and libsqlite3-0 are
# downloaded with a separate apt source list and lists folder (bookworm's apt state is
# untouched), extracted with dpkg -x into a private tree, and the apptainer binary and
# its starter are given that tree's loader and library folder with patchelf.  The
# binary is installed as /usr/bin/apptainer (it finds its config relative to itself),
# its config at /etc/apptainer, its starter under /usr/lib/x86_64-linux-gnu/apptainer/.
# squashfs-tools (building SIF files) and uidmap come from bookworm.
#
# Idempotent: a second run only checks that everything is there (about a second).
#
# Usage: scripts/apptainer-env.sh
#
# Environment:
#   REPLAY_TUI_ENV_DIR        state dir (default /var/lib/replay-tui-env)
#   REPLAY_TUI_DEBIAN_MIRROR  Debian mirror serving sid (default: from apt sources)
#
# Why the settings:
#   root default capabilities = no   this VM's root lacks a capability (CAP_SYS_RESOURCE):
#                                    apptainer's default (full) fails to apply it.
#   systemd cgroups = no             systemd is not init here: the limits (--memory,
#                                    --cpus, --pids-limit) go through cgroupfs.
#   /var/lib/apptainer/mnt/session   the session folder apptainer mounts its image under.
set -euo pipefail

STATE="${REPLAY_TUI_ENV_DIR:-/var/lib/replay-tui-env}"
SID_DIR="$STATE/apptainer-sid"
TREE=/opt/replay-tui-apptainer
LIBDIR="$TREE/usr/lib/x86_64-linux-gnu"
LOADER="$LIBDIR/ld-linux-x86-64.so.2"
WANT_VERSION="1.4.5"
PKGS=(apptainer libc6 libseccomp2 libsqlite3-0)

log() { printf '[apptainer-env] %s\n' "$*" >&2; }
die() { printf '[apptainer-env] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[apptainer-env] ERROR: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

case "${1:-}" in
  "") ;;
  -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
  *) die "unknown option: $1 (see --help)" ;;
esac

[[ $(id -u) -eq 0 ]] || die "must run as root"
mkdir -p "$STATE"
exec 9>"$STATE/.apptainer.lock"
flock -w 1800 9 || die "another apptainer-env.sh run holds $STATE/.apptainer.lock"

CONF=/etc/apptainer/apptainer.conf
ready() {
  [[ -x /usr/bin/apptainer ]] \
    && [[ -x /usr/lib/x86_64-linux-gnu/apptainer/bin/starter ]] \
    && [[ -d /var/lib/apptainer/mnt/session ]] \
    && command -v mksquashfs >/dev/null && command -v unsquashfs >/dev/null \
    && command -v newuidmap >/dev/null \
    && grep -qx 'root default capabilities = no' "$CONF" 2>/dev/null \
    && grep -qx 'systemd cgroups = no' "$CONF" 2>/dev/null \
    && [[ "$(/usr/bin/apptainer --version 2>/dev/null)" == "apptainer version $WANT_VERSION"* ]]
}

if ready; then
  log "apptainer $WANT_VERSION ready"
  exit 0
fi

# ---------------------------------------------------------------- 1. bookworm packages
missing=()
command -v mksquashfs >/dev/null || missing+=(squashfs-tools)
command -v newuidmap >/dev/null || missing+=(uidmap)
command -v patchelf >/dev/null || missing+=(patchelf)
if ((${#missing[@]})); then
  log "installing from bookworm: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update || die "apt-get update failed"
  apt-get install -y --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]} failed"
fi

# ---------------------------------------------------------------- 2. sid's packages
debian_mirror() {
  if [[ -n "${REPLAY_TUI_DEBIAN_MIRROR:-}" ]]; then echo "$REPLAY_TUI_DEBIAN_MIRROR"; return; fi
  local uri=""
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}
mkdir -p "$SID_DIR/lists/partial" "$SID_DIR/cache/archives/partial" "$SID_DIR/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) sid main" \
  >"$SID_DIR/sid.list"
APT=(-o "Dir::Etc::SourceList=$SID_DIR/sid.list" -o "Dir::Etc::SourceParts=$SID_DIR/none.d"
     -o "Dir::State::Lists=$SID_DIR/lists" -o "Dir::Cache=$SID_DIR/cache"
     -o "APT::Sandbox::User=root")
have_debs() { local p; for p in "${PKGS[@]}"; do compgen -G "$SID_DIR/debs/${p}_*.deb" >/dev/null || return 1; done; }
if ! have_debs; then
  log "downloading sid's ${PKGS[*]} (separate source list: $SID_DIR/sid.list)"
  apt-get "${APT[@]}" update >&2 || die "apt-get update of sid failed"
  (cd "$SID_DIR/debs" && apt-get "${APT[@]}" download "${PKGS[@]}" >&2) || die "apt-get download from sid failed"
fi
deb_version=$(dpkg-deb -f "$(compgen -G "$SID_DIR/debs/apptainer_*.deb" | head -1)" Version)
[[ "$deb_version" == "$WANT_VERSION"* ]] || die "sid's apptainer is $deb_version, not $WANT_VERSION"

# ---------------------------------------------------------------- 3. the private tree
log "extracting into $TREE"
rm -rf "$TREE.new"
mkdir -p "$TREE.new"
for deb in "$SID_DIR"/debs/*.deb; do dpkg -x "$deb" "$TREE.new"; done
NEWLIB="$TREE.new/usr/lib/x86_64-linux-gnu"
[[ -e "$NEWLIB/ld-linux-x86-64.so.2" ]] || die "sid's libc6 has no loader at usr/lib/x86_64-linux-gnu"
# The binaries point at the final tree's paths, so the tree moves into place first.
rm -rf "$TREE.old"
[[ -e "$TREE" ]] && mv "$TREE" "$TREE.old"
mv "$TREE.new" "$TREE"
rm -rf "$TREE.old"
for bin in usr/bin/apptainer usr/lib/x86_64-linux-gnu/apptainer/bin/starter; do
  patchelf --set-interpreter "$LOADER" --force-rpath --set-rpath "$LIBDIR" "$TREE/$bin"
done

# ---------------------------------------------------------------- 4. install
install -m 0755 "$TREE/usr/bin/apptainer" /usr/bin/apptainer
mkdir -p /usr/lib/x86_64-linux-gnu/apptainer
cp -a "$TREE/usr/lib/x86_64-linux-gnu/apptainer/." /usr/lib/x86_64-linux-gnu/apptainer/
if [[ ! -f "$CONF" ]]; then
  mkdir -p /etc/apptainer
  cp -a "$TREE/etc/apptainer/." /etc/apptainer/
fi
if grep -q '^root default capabilities' "$CONF"; then
  sed -i 's/^root default capabilities.*/root default capabilities = no/' "$CONF"
else
  echo 'root default capabilities = no' >>"$CONF"
fi
if grep -q '^systemd cgroups' "$CONF"; then
  sed -i 's/^systemd cgroups.*/systemd cgroups = no/' "$CONF"
else
  echo 'systemd cgroups = no' >>"$CONF"
fi
mkdir -p /var/lib/apptainer/mnt/session

ready || die "apptainer is installed but does not answer: /usr/bin/apptainer --version failed"
log "apptainer $WANT_VERSION ready"
