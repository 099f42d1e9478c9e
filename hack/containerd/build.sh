#!/usr/bin/env bash
# Builds containerd and containerd-shim-runc-v2 at the version in go.mod, and
# runc (cgo: its nsexec is C; with seccomp, against Debian's libseccomp-dev)
# into a cache directory outside the checkout, keyed on go.mod and go.sum; a
# finished entry is reused. Prints the directory holding both on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${CONTAINERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talos-nodeinit/containerd}
key=$(cd "$here" && cat go.mod go.sum build.sh | sha256sum | cut -c1-16)
dest="$cache_root/$key"
if [ -x "$dest/containerd" ] && [ -x "$dest/containerd-shim-runc-v2" ] && [ -x "$dest/runc" ]; then
	echo "containerd: reusing $dest" >&2
	echo "$dest"
	exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ ! -x "$dest/runc" ]; then
	version=$(cd "$here" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
	echo "containerd: building containerd $version, its runc shim and runc (about 3 min cold on 2 cores)" >&2
	start=$(date +%s)
	tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# containerd's own release flags: static, no cgo snapshotters.
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$version" \
		-o "$tmp/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
	# runc 1.4.0: Debian's 1.1.5 fails to start Talos's extension containers
	# under containerd 2.x ("can't get final child's PID from pipe").
	if [ ! -e /usr/include/seccomp.h ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >&2
	fi
	(cd "$here" && CGO_ENABLED=1 go build -trimpath -tags seccomp -ldflags "-s -w" -o "$tmp/runc" github.com/opencontainers/runc)
	rm -rf "$dest"
	mv "$tmp" "$dest"
	trap - EXIT
	echo "containerd: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$dest"
