#!/usr/bin/env bash
# Builds containerd and containerd-shim-runc-v2 at the version in go.mod
# into a cache directory outside the checkout, keyed on go.mod and go.sum; a
# finished entry is reused. Prints the directory holding both on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${CONTAINERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talos-nodeinit/containerd}
key=$(cd "$here" && cat go.mod go.sum build.sh | sha256sum | cut -c1-16)
dest="$cache_root/$key"
if [ -x "$dest/containerd" ] && [ -x "$dest/containerd-shim-runc-v2" ]; then
	echo "containerd: reusing $dest" >&2
	echo "$dest"
	exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ ! -x "$dest/containerd" ]; then
	version=$(cd "$here" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
	echo "containerd: building containerd $version and its runc shim (about 3 min cold on 2 cores)" >&2
	start=$(date +%s)
	tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# containerd's own release flags: static, no cgo snapshotters.
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$version" \
		-o "$tmp/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
	rm -rf "$dest"
	mv "$tmp" "$dest"
	trap - EXIT
	echo "containerd: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$dest"
