#!/usr/bin/env bash
# Installs what the test suite needs on a Debian machine, as root: the real
# router lab (miniupnpd with its nftables backend, the upnpc peer client,
# nftables, iproute2, curl, and mount, with which the lab gives the daemon a
# private /dev/console) and staticcheck at a pinned version.
set -euo pipefail
STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"

pkgs=(miniupnpd miniupnpd-nftables miniupnpc nftables iproute2 curl mount)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The Debian package may start a system miniupnpd; the tests run their own.
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now miniupnpd >/dev/null 2>&1 || true; fi

GOBIN="$(go env GOPATH)/bin"
if ! "$GOBIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi
