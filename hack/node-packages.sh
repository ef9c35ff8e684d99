#!/usr/bin/env bash
# The host packages of the embedded node and of the image builds, from Debian's archive: containerd, runc, the CNI
# plugins, iptables and conntrack (the node), docker.io, mmdebstrap and busybox-static (make images). Installs what
# is missing when run as root on Debian or Ubuntu; elsewhere says in one line what is missing and what to use
# instead. Prints the versions found, and which differ in major.minor from the tested ones (hack/versions.env).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

declare -A package_of=(
  [containerd]=containerd [runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins [iptables]=iptables
  [conntrack]=conntrack [dockerd]=docker.io [mmdebstrap]=mmdebstrap [ip]=iproute2
  [/bin/busybox]=busybox-static
)
missing=()
for binary in "${!package_of[@]}"; do
  if [[ $binary == /* ]]; then [ -x "$binary" ] || missing+=("${package_of[$binary]}")
  else command -v "$binary" >/dev/null || missing+=("${package_of[$binary]}"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(uname -s)" != Linux ]; then
    echo "node-packages: the embedded node needs Linux; here, use kind with Tilt's kind mode (docs/development.md)" >&2
    exit 3
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "node-packages: missing ${missing[*]} (Debian packages); install them as root, or use kind with Tilt's kind mode" >&2
    exit 3
  fi
  echo "node-packages: installing ${missing[*]} from Debian's archive" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

minor() { sed -E 's/^[^0-9]*([0-9]+\.[0-9]+).*/\1/' <<<"$1"; }
check() {
  local name=$1 tested=$2 found=$3
  if [ "$(minor "$found")" != "$(minor "$tested")" ]; then
    echo "node-packages: $name $found here, tested with $tested" >&2
  fi
}
check containerd "$CONTAINERD_VERSION" "$(containerd --version | awk '{print $3}')"
check runc "$RUNC_VERSION" "$(runc --version | awk 'NR==1 {print $3}')"
check "CNI plugins" "$CNI_PLUGINS_VERSION" "$(dpkg-query -W -f '${Version}' containernetworking-plugins 2>/dev/null || echo unknown)"
check dockerd "$DOCKER_VERSION" "$(dockerd --version | awk '{print $3}' | tr -d ,)"
