#!/usr/bin/env bash
# Builds Kubernetes binaries and etcd for one Kubernetes minor version, from
# the module pinned in hack/kube-tools/v<minor>/, into a cache directory
# outside the checkout keyed on the version and the sha256 of that module's
# go.sum. Binaries already in the cache entry are reused as they are; a
# missing one is first looked for in an older entry of the same minor (reused
# when it embeds exactly the module versions it would be built from now, so
# adding a command to tools.go does not rebuild the others), and otherwise
# built. A build that is interrupted leaves nothing half-done behind (each
# binary is renamed into place).
#
# Usage: build.sh [VERSION]   VERSION is a minor such as 1.37 (the default,
# what Talos 1.14 installs), 1.36 (Talos 1.13's) or 1.31 (the oldest Talos
# 1.13 supports); the
# environment variable KUBE_VERSION does the same.
# KUBE_TOOLS_BINS lists the binaries wanted (default: kube-apiserver
# kube-controller-manager etcd; kubelet and kube-scheduler are also known,
# for the real-node tests, and only built when asked for).
#
# Prints the binary directory on stdout. Logs, with progress, go to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
default_version=1.37
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
read -r -a bins <<<"${KUBE_TOOLS_BINS:-kube-apiserver kube-controller-manager etcd}"

# pkg prints the Go package a binary is built from.
pkg() {
	case $1 in
	etcd) echo ./cmd/etcd ;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kubelet) echo "k8s.io/kubernetes/cmd/$1" ;;
	*)
		echo "kube-tools: unknown binary $1 in KUBE_TOOLS_BINS; known: etcd kube-apiserver kube-controller-manager kube-scheduler kubelet" >&2
		return 2
		;;
	esac
}
for b in "${bins[@]}"; do pkg "$b" >/dev/null; done

missing() {
	local b
	for b in "${bins[@]}"; do [ -x "$dest/$b" ] || echo "$b"; done
}
if [ -z "$(missing)" ]; then
	echo "kube-tools: reusing $dest" >&2
	echo "$dest"
	exit 0
fi

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$mod/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)

ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
	ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
done

mkdir -p "$cache_root"
# One build at a time: parallel test packages wait for the first one.
exec 9>"$cache_root/.lock"
flock 9
mapfile -t todo < <(missing)
if [ ${#todo[@]} -eq 0 ]; then
	echo "$dest"
	exit 0
fi
mkdir -p "$dest"
echo "kube-tools: Kubernetes $k8s_version: $(echo "${todo[@]}") not cached yet; resolving modules (the first time this downloads them from the Go module proxy, a minute or two), then building" >&2
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$mod"
export CGO_ENABLED=0

# The module versions a binary is made of: the Go version, then one
# "path version[ => path version]" line per module, sorted.
wanted_mods() {
	go env GOVERSION
	go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}{{end}}{{end}}' "$1" | grep . | sort -u
}
built_mods() {
	go version -m "$1" | awk '
		NR == 1 { print $2; next }
		($1 == "dep" || ($1 == "mod" && $3 != "(devel)")) { if (cur != "") print cur; cur = $2 " " $3; next }
		$1 == "=>" { cur = cur " => " $2 " " $3 }
		END { if (cur != "") print cur }' | { read -r gov; echo "$gov"; sort -u; }
}
# reuse copies $1 from an older cache entry of this minor if it is made of
# exactly the modules it would be built from now.
reuse() {
	local b=$1 want old
	want=$(wanted_mods "$(pkg "$b")")
	for old in "$cache_root"/v"$version"-*/"$b"; do
		[ -x "$old" ] && [ "$old" != "$dest/$b" ] || continue
		if [ "$(built_mods "$old")" = "$want" ]; then
			cp "$old" "$tmp/$b" && mv "$tmp/$b" "$dest/$b"
			echo "kube-tools: $b reused from $(dirname "$old") (same module versions)" >&2
			return 0
		fi
	done
	return 1
}

failed() {
	kill $ticker 2>/dev/null || true
	echo "kube-tools: building $1 failed (above). It needs the Go module proxy (go env GOPROXY) and about 2 GiB of free memory; rerun 'make kube-tools', which keeps what was built." >&2
	exit 1
}

build=()
for b in "${todo[@]}"; do reuse "$b" || build+=("$b"); done
if [ ${#build[@]} -gt 0 ]; then
	echo "kube-tools: building ${build[*]} (Kubernetes $k8s_version, etcd $etcd_version) into $dest" >&2
	echo "kube-tools: from an empty Go build cache one binary takes 4-5 min on 2 cores (measured: kube-scheduler 303s, kubelet 270s, each alone); later runs reuse the cache" >&2
	start=$(date +%s)
	n=0
	for b in "${build[@]}"; do
		t0=$(date +%s)
		echo "kube-tools: [$((++n))/${#build[@]}] $b ..." >&2
		# A line every 30 s, so a long compile never looks stuck.
		( while sleep 30; do echo "kube-tools: [$n/${#build[@]}] $b still building, $(($(date +%s) - t0))s so far (cold: etcd ~10s, kube-controller-manager ~75s, the others 4-5 min)" >&2; done ) &
		ticker=$!
		if [ "$b" = etcd ]; then
			go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$tmp/$b" ./cmd/etcd || failed "$b"
		else
			go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" "$(pkg "$b")" || failed "$b"
		fi
		kill $ticker 2>/dev/null; wait $ticker 2>/dev/null || true
		mv "$tmp/$b" "$dest/$b"
		echo "kube-tools: [$n/${#build[@]}] $b built in $(($(date +%s) - t0))s" >&2
	done
	echo "kube-tools: ${build[*]} built in $(($(date +%s) - start))s" >&2
fi
echo "$dest"
