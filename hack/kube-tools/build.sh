#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and etcd for one Kubernetes
# minor version, from the module pinned in hack/kube-tools/v<minor>/, into a
# cache directory outside the checkout keyed on the version and the sha256 of
# that module's go.sum. A finished cache entry is reused as is; a build that
# is interrupted leaves nothing half-done behind (it is renamed into place).
#
# Usage: build.sh [VERSION]   VERSION is a minor such as 1.36 (the default,
# what Talos 1.13 installs) or 1.31 (the oldest Talos 1.13 supports); the
# environment variable KUBE_VERSION does the same.
#
# Prints the binary directory on stdout. Logs, with progress, go to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
default_version=1.36
version=${1:-${KUBE_VERSION:-$default_version}}
version=${version#v}
mod="$here/v$version"
if [ ! -f "$mod/go.mod" ]; then
	echo "kube-tools: no module for Kubernetes $version; have: $(cd "$here" && ls -d v*/ | tr -d / | tr '\n' ' ')" >&2
	exit 2
fi
cache_root=${KUBE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talos-nodeinit/kube-tools}
key=v$version-$(sha256sum "$mod/go.sum" | cut -c1-16)
dest="$cache_root/$key"
bins=(kube-apiserver kube-controller-manager etcd)

complete() {
	for b in "${bins[@]}"; do [ -x "$dest/$b" ] || return 1; done
}
if complete; then
	echo "kube-tools: reusing $dest" >&2
	echo "$dest"
	exit 0
fi

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$mod/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

mkdir -p "$cache_root"
# One build at a time: parallel test packages wait for the first one.
exec 9>"$cache_root/.lock"
flock 9
if complete; then
	echo "$dest"
	exit 0
fi
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "kube-tools: building Kubernetes $k8s_version and etcd $etcd_version into $dest" >&2
echo "kube-tools: a cold build takes 6-10 min per version on 2 cores (3 binaries); later runs reuse the cache" >&2
cd "$mod"
start=$(date +%s)
step() { # name, then the go build arguments
	local name=$1 t0
	shift
	t0=$(date +%s)
	echo "kube-tools: [$((++n))/${#bins[@]}] $name ..." >&2
	CGO_ENABLED=0 go build -trimpath "$@"
	echo "kube-tools: [$n/${#bins[@]}] $name built in $(( $(date +%s) - t0 ))s" >&2
}
n=0
step kube-apiserver -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
step kube-controller-manager -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
step etcd -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$tmp/etcd" ./cmd/etcd
echo "kube-tools: Kubernetes $k8s_version built in $(( $(date +%s) - start ))s" >&2

rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
