#!/usr/bin/env bash
# exploration: machined v1.14.1 as PID 1 in container mode (unshare)
set -euo pipefail
D=/tmp/tnode; R=$D/rootfs
export USERDATA=$(base64 -w0 $D/worker.yaml)
ip netns del tnode 2>/dev/null || true
ip link del tnh 2>/dev/null || true
ip netns add tnode
ip link add tnh type veth peer name eth0 netns tnode
ip addr add 10.99.0.1/24 dev tnh; ip link set tnh up
ip -n tnode addr add 10.99.0.2/24 dev eth0; ip -n tnode link set eth0 up; ip -n tnode link set lo up
ip -n tnode route add default via 10.99.0.1
exec nsenter --net=/var/run/netns/tnode unshare --pid --mount --uts --ipc --cgroup --fork --propagation private -- bash -c '
set -e
R='$R'; D='$D'
mount --make-rprivate /
mount --bind $R $R

mount -t proc proc $R/proc
mount --rbind /dev $R/dev
mount -t sysfs sysfs $R/sys
mount -t tmpfs tmpfs $R/sys/fs/cgroup
for c in cpu cpuacct memory pids devices freezer blkio cpuset hugetlb net_cls net_prio perf_event; do mkdir -p $R/sys/fs/cgroup/$c; mount -t cgroup -o $c cgroup $R/sys/fs/cgroup/$c 2>/dev/null || rmdir $R/sys/fs/cgroup/$c; done
mount -t tmpfs tmpfs $R/run; mount -t tmpfs tmpfs $R/system; mount -t tmpfs tmpfs $R/tmp
mkdir -p $R/system/state
mount --bind $D/state/var $R/var; mount --bind $D/state/state $R/system/state; mount --bind $D/state/opt $R/opt
hostname tnode-1; ip link set lo up
cd $R; mkdir -p .oldroot; pivot_root . .oldroot; cd /
/.oldroot/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path /.oldroot/lib/x86_64-linux-gnu:/.oldroot/usr/lib/x86_64-linux-gnu /.oldroot/usr/bin/umount -l /.oldroot

for v in $(compgen -e); do [ "$v" = USERDATA ] || unset "$v"; done
export PLATFORM=container
exec /sbin/init
'
