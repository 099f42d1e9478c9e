#!/usr/bin/env bash
# source-tarball.sh REF [OUTDIR]: writes talos-nodeinit-<version>.tar.gz, the
# source tarball misc/nodeinit-agent/pkg.yaml builds from, as `git archive` of
# REF (a release tag, e.g. v0.1.0; for a trial, VERSION=v0.1.0 with HEAD),
# and prints the vars.yaml lines that pin it. A release uploads exactly this
# file as a release asset: the checksums are of these bytes, and hold for
# the asset only (GitHub's own /archive/ tarball need not be byte-equal).
set -euo pipefail
ref=${1:?usage: source-tarball.sh REF [OUTDIR]}
out=${2:-.}
# VERSION names a trial tarball of a ref that is not a tag (HEAD).
version=${VERSION:-$ref}
file="$out/talos-nodeinit-$version.tar.gz"
mkdir -p "$out"
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
git -C "$top" archive --format=tar.gz --prefix="talos-nodeinit-$version/" -o "$(realpath "$file")" "$ref"
echo "# $file"
echo "NODEINIT_AGENT_VERSION: $version"
echo "NODEINIT_AGENT_SHA256: $(sha256sum "$file" | cut -d' ' -f1)"
echo "NODEINIT_AGENT_SHA512: $(sha512sum "$file" | cut -d' ' -f1)"
