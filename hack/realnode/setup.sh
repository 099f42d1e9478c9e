#!/usr/bin/env bash
# Installs what a real node needs on this host, with apt, when it is missing:
# containerd (which also ships ctr) and runc. Running it again changes
# nothing. Prints the versions found.
#
# Debian's containerd package enables a system containerd service; the
# real-node test never uses it (it runs its own containerd with its own root,
# state and socket), so the service is stopped and disabled when systemd
# runs one, and the package's post-install start is suppressed otherwise.
set -euo pipefail

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v ctr >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "realnode setup: ${need[*]} missing; run this script as root (it installs them with apt)" >&2
		exit 1
	fi
	echo "realnode setup: installing ${need[*]} with apt" >&2
	# No service starts from the package scripts: the test runs its own.
	policy=/usr/sbin/policy-rc.d
	had_policy=false
	[ -e $policy ] && had_policy=true
	$had_policy || { printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy; }
	trap '$had_policy || rm -f $policy' EXIT
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
		{ apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi
if [ -d /run/systemd/system ] && systemctl is-enabled containerd >/dev/null 2>&1; then
	systemctl disable --now containerd >&2 || true
fi
echo "containerd: $(containerd --version)"
echo "ctr: $(ctr --version)"
echo "runc: $(runc --version | head -1)"
