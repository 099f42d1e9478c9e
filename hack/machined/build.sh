#!/usr/bin/env bash
# Builds machined-standin (this module) into a cache directory outside the
# checkout, keyed on the sha256 of this module's sources and go.sum; a
# finished entry is reused as is. Prints the binary's path on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${MACHINED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talos-nodeinit/machined}
key=$(cd "$here" && cat go.mod go.sum *.go | sha256sum | cut -c1-16)
dest="$cache_root/$key/machined-standin"
if [ -x "$dest" ]; then
	echo "machined: reusing $dest" >&2
	echo "$dest"
	exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ ! -x "$dest" ]; then
	echo "machined: building the machined stand-in from Talos v1.14.1's authorization packages (about 1 min cold)" >&2
	start=$(date +%s)
	tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/siderolabs/talos/pkg/machinery/version.Tag=$(go list -m -f '{{.Version}}' github.com/siderolabs/talos)" -o "$tmp/machined-standin" .)
	rm -rf "$cache_root/$key"
	mv "$tmp" "$cache_root/$key"
	trap - EXIT
	echo "machined: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$dest"
