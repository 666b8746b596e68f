#!/usr/bin/env bash
# deploy/kube/down.sh (`make kube-down`): removes everything up.sh made,
# and nothing else: the processes of its pidfiles, the containers and
# network namespaces its containerd made, the mounts under .data/kube/state,
# the bridge, the kube-proxy, CNI and kube-router iptables chains and
# ipsets, the kubepods cgroups, and the sysctls as they were. The build
# cache (.data/kube/bin, images, src) stays. Safe to run twice, or with
# nothing up.
set -uo pipefail
. "$(dirname "$0")/env.sh"
[ "$(id -u)" = 0 ] || { echo "kube-down: needs root" >&2; exit 1; }

# stop NAME: SIGTERM the pidfile's process, SIGKILL after 15 s.
stop() {
	local name=$1 pid
	[ -f "$RUN/$name.pid" ] || return 0
	pid=$(cat "$RUN/$name.pid")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null
		for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
		kill -9 "$pid" 2>/dev/null && klog "$name killed" || klog "$name stopped"
	fi
	rm -f "$RUN/$name.pid"
}

# The kubelet first, so it restarts nothing; then every container of the
# k8s.io namespace, while containerd still runs.
stop kube-router
stop kubelet
if alive containerd; then
	for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
	sleep 2
	for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1; done
	for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1; done
fi
stop kube-proxy
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
stop containerd
# containerd-shim processes of our containerd (their -address is our socket).
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done

# Network namespaces the CRI made (cni-*, recorded by up.sh as ours: none
# existed before) and every mount under our state directory, deepest first.
if [ -d /run/netns ]; then
	for ns in /run/netns/cni-*; do
		[ -e "$ns" ] || continue
		umount "$ns" 2>/dev/null; rm -f "$ns"
	done
fi
if [ -d "$STATE" ]; then
	findmnt -rn -o TARGET | grep -F "$STATE/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
fi

# iptables: kube-proxy's and kube-router's own cleanup, then any KUBE-*,
# CNI-* or KUBE-ROUTER-* chain left (up.sh refuses to start when such chains
# already exist, so they are ours).
[ -x "$BIN/kube-proxy" ] && kube-proxy --cleanup >/dev/null 2>&1
[ -x "$BIN/kube-router" ] && kube-router --cleanup-config >/dev/null 2>&1
for ipt in iptables ip6tables; do
for table in filter nat mangle raw; do
	rules=$($ipt-save -t "$table" 2>/dev/null) || continue
	# Rules that jump to or sit in our chains.
	echo "$rules" | grep -E '^-A ' | grep -E -- '-j (KUBE-|CNI-)|^-A (KUBE-|CNI-)' | while read -r r; do
		eval "$ipt -t $table ${r/-A /-D }" 2>/dev/null
	done
	for ch in $(echo "$rules" | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do
		$ipt -t "$table" -F "$ch" 2>/dev/null
	done
	for ch in $(echo "$rules" | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do
		$ipt -t "$table" -X "$ch" 2>/dev/null
	done
done
done
# nftables tables that iptables-nft created for the cluster (absent when
# up.sh started, recorded in nft-tables.before) and that hold no rule now.
if [ -f "$STATE/nft-tables.before" ] && command -v nft >/dev/null; then
	nft list tables 2>/dev/null | while read -r _ fam name; do
		grep -qxF "table $fam $name" "$STATE/nft-tables.before" && continue
		nft list table "$fam" "$name" | grep -qvE '^[[:space:]]*(table .*\{|chain .*\{|type .* hook .*;|\}|)$' && continue
		nft delete table "$fam" "$name" && klog "nftables table $fam $name removed"
	done
fi
for s in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router-)'); do ipset destroy "$s" 2>/dev/null; done

# The bridge (its route goes with it) and the sysctls.
ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE" && klog "bridge $BRIDGE removed"
if [ -f "$STATE/sysctl.saved" ]; then
	while read -r kv; do sysctl -q -w "$kv"; done <"$STATE/sysctl.saved"
	klog "sysctls restored: $(tr '\n' ' ' <"$STATE/sysctl.saved")"
fi

# The kubelet's cgroups (cgroupfs driver: kubepods under every controller).
for ctl in /sys/fs/cgroup/*/; do
	[ -d "$ctl/kubepods" ] || continue
	find "$ctl/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# /run/containerd (shim sockets, runc state) and /run/netns, if up.sh made them.
for d in /run/containerd /run/netns; do
	[ -f "$STATE/made$(echo "$d" | tr / -)" ] && rm -rf "$d"
done
rm -rf "$STATE"
rm -f "$KUBECONFIG_ADMIN"
klog "down: nothing of the cluster is left (build cache kept in $DATA)"
exit 0
