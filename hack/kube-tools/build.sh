#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and etcd from the versions
# pinned in this module, into a cache directory outside the checkout keyed on
# the sha256 of go.sum. A finished cache entry is reused as is; a build that
# is interrupted leaves nothing half-done behind (it is renamed into place).
#
# Prints the binary directory on stdout. Logs go to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${KUBE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talos-nodeinit/kube-tools}
key=$(sha256sum "$here/go.sum" | cut -c1-16)
dest="$cache_root/$key"

if [ -x "$dest/kube-apiserver" ] && [ -x "$dest/kube-controller-manager" ] && [ -x "$dest/etcd" ]; then
	echo "kube-tools: reusing $dest" >&2
	echo "$dest"
	exit 0
fi

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$here/go.mod")
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
if [ -x "$dest/kube-apiserver" ] && [ -x "$dest/kube-controller-manager" ] && [ -x "$dest/etcd" ]; then
	echo "$dest"
	exit 0
fi
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "kube-tools: building kubernetes $k8s_version and etcd $etcd_version into $dest (cold build takes ~10 min on 2 cores)" >&2
cd "$here"
start=$(date +%s)
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$tmp/etcd" ./cmd/etcd
echo "kube-tools: built in $(( $(date +%s) - start ))s" >&2

rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
