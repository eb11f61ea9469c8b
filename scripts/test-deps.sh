#!/usr/bin/env bash
# Installs what `make test` needs beyond Go: Node.js and npm for the HTTP
# cache conformance suite, Chromium for the status-page browser test, and
# nftables (with iproute2) for the network-fault lab.
# Debian packages; needs root (as on CI). Without root it only reports.
set -euo pipefail
need=()
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "test-deps: missing ${need[*]} and not root: the tests that need them will be skipped or fail" >&2
  exit 0
fi
echo "test-deps: installing ${need[*]} from Debian packages"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
