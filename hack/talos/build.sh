#!/usr/bin/env bash
# Builds Talos's own machined (github.com/siderolabs/talos/internal/app/machined)
# at the version in go.mod, with Talos's build tags and ldflags (its Makefile:
# GO_BUILDTAGS, GO_MACHINED_LDFLAGS, CGO_ENABLED=0), into a cache directory
# outside the checkout keyed on this module's go.mod, go.sum and patches. A
# finished entry is reused as is. Prints the binary's path on stdout.
#
# machined is a main package inside Talos's module, so it is built in a
# writable copy of that module (patches/ applied; see README.md here) that
# this module's go.mod replaces github.com/siderolabs/talos with.
#
# Usage: build.sh [v1.13]. Without an argument, the release in this
# directory's go.mod (v1.14.1); with v1.13, the module in v1.13/ (Talos
# 1.13's newest served release), with the patches its patches/ links to.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script="$here/build.sh"
if [ $# -gt 0 ]; then
	[ -f "$here/$1/go.mod" ] || { echo "talos: no module $here/$1 (known: v1.13)" >&2; exit 2; }
	here="$here/$1"
fi
version=$(cd "$here" && go list -m -f '{{.Version}}' github.com/siderolabs/talos)
cache_root=${TALOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talos-nodeinit/talos}
key=$(cd "$here" && cat go.mod go.sum "$script" patches/* | sha256sum | cut -c1-16)
dest="$cache_root/$version-$key/machined"
if [ -x "$dest" ]; then
	echo "talos: reusing $dest" >&2
	echo "$dest"
	exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ ! -x "$dest" ]; then
	echo "talos: building machined $version from Talos's module (about 4 min cold on 2 cores)" >&2
	start=$(date +%s)
	tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	# The forks Talos replaces modules with are served by the module proxy
	# but unknown to the checksum database: go.sum pins their hashes.
	export GONOSUMDB=github.com/siderolabs/coredns,github.com/smira/kobject,github.com/siderolabs/wgctrl-go
	src=$(cd "$here" && go mod download -json "github.com/siderolabs/talos@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	cp -r "$src" "$tmp/talos"
	chmod -R u+w "$tmp/talos"
	for p in "$here"/patches/*.patch; do
		patch -s -d "$tmp/talos" -p1 < "$p"
	done
	mkdir "$tmp/build"
	cp "$here/go.mod" "$here/go.sum" "$tmp/build/"
	(cd "$tmp/build" && go mod edit -replace "github.com/siderolabs/talos=$tmp/talos" &&
		CGO_ENABLED=0 go build -trimpath -tags tcell_minimal,grpcnotrace \
			-ldflags "-s -w -X golang.zx2c4.com/wireguard/ipc.socketDirectory=/system/wireguard-sock -X github.com/siderolabs/talos/pkg/machinery/version.Tag=$version" \
			-o "$tmp/machined" github.com/siderolabs/talos/internal/app/machined)
	mkdir -p "$cache_root/$version-$key"
	mv "$tmp/machined" "$dest"
	echo "talos: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$dest"
