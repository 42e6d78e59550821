#!/usr/bin/env bash
# Install cosign (the Sigstore CLI) for the tests that check a bundle's SLSA provenance
# with an independent verifier: `cosign verify-blob-attestation`.  Bookworm has no cosign
# package; Debian's unstable suite (sid) has one.  Its .deb is downloaded with a source
# list and a package-lists folder of its own (the host's apt sources are never touched)
# and unpacked with `dpkg -x`, not installed: nothing else from sid comes onto the host.
#
# Idempotent: when the wanted version is already unpacked it only prints where it is.
#
# Environment:
#   REPLAY_TUI_COSIGN_DIR   where cosign goes (default /var/lib/replay-tui-env/cosign);
#                           the binary is $REPLAY_TUI_COSIGN_DIR/usr/bin/cosign
#   REPLAY_TUI_COSIGN_VERSION   the Debian package version wanted (default 3.1.1*)
set -euo pipefail

DIR="${REPLAY_TUI_COSIGN_DIR:-/var/lib/replay-tui-env/cosign}"
WANT="${REPLAY_TUI_COSIGN_VERSION:-3.1.1}"
BIN="$DIR/usr/bin/cosign"
STAMP="$DIR/.deb-version"  # Debian's build prints "GitVersion: devel": the package says

if [ -x "$BIN" ] && [ -f "$STAMP" ] && grep -q "^$WANT" "$STAMP" && "$BIN" version >/dev/null 2>&1; then
  echo "cosign $(cat "$STAMP") at $BIN"
  exit 0
fi

APT="$DIR/apt"
mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$DIR/deb"
cat >"$APT/sources.list" <<LIST
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
LIST
: >"$APT/empty.d.list"
apt_opts=(
  -o "Dir::Etc::sourcelist=$APT/sources.list"
  -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$APT/lists"
  -o "Dir::Cache::archives=$APT/archives"
  -o "Dir::State::status=/var/lib/dpkg/status"
  -o "APT::Get::List-Cleanup=0"
  -o "Debug::NoLocking=1"
)
apt-get "${apt_opts[@]}" -qq update
version=$(apt-cache "${apt_opts[@]}" policy cosign | awk '/Candidate:/ {print $2}')
case "$version" in
  "$WANT"*) ;;
  *) echo "cosign-env: sid offers cosign ${version:-none}, not $WANT" >&2; exit 1 ;;
esac
# apt drops to the _apt user to download where it can; this folder is root's, so it says
# so and downloads as root: nothing is installed, only unpacked
(cd "$DIR/deb" && rm -f cosign_*.deb && apt-get "${apt_opts[@]}" -qq download "cosign=$version" 2>&1 | grep -v "unsandboxed" >&2 || true)
ls "$DIR"/deb/cosign_*.deb >/dev/null
dpkg -x "$DIR"/deb/cosign_*.deb "$DIR"
"$BIN" version >/dev/null
echo "$version" >"$STAMP"
echo "cosign $version at $BIN"
