#!/usr/bin/env bash
# deploy/kube/up.sh (`make kube-up`): a one-node Kubernetes cluster on this
# machine. Needs root and KUBE_UP_CONFIRM=1: it sets sysctls
# (net.ipv4.ip_forward, net.bridge.bridge-nf-call-iptables), creates the
# bridge rfkube0 with its route, and adds iptables rules and ipsets (the
# kube-proxy, CNI and kube-router chains). deploy/kube/down.sh puts all of
# it back. Running it while the cluster is up only checks that it is.
#
# Pieces, in start order: containerd (Debian, cgroupfs, the CNI bridge),
# etcd, kube-apiserver (Pod Security admission, the aggregation layer),
# kube-controller-manager, kube-scheduler, kubelet (cgroup v1), kube-proxy
# (iptables), kube-router (NetworkPolicy only), then in the cluster:
# CoreDNS, local PersistentVolumes, KEDA (its own config/ at the pinned
# version), the prometheus-operator CRDs. Binaries and images come from
# deploy/kube/build.sh's cache.
set -euo pipefail
. "$(dirname "$0")/env.sh"

[ "$(id -u)" = 0 ] || { echo "kube-up: needs root" >&2; exit 1; }
if [ "${KUBE_UP_CONFIRM:-}" != 1 ]; then
	cat >&2 <<EOF
kube-up changes this machine: sysctls net.ipv4.ip_forward and
net.bridge.bridge-nf-call-iptables, a bridge $BRIDGE ($BRIDGE_IP, pods
$POD_CIDR, services $SVC_CIDR), iptables chains and ipsets.
\`make kube-down\` undoes it. Run again with KUBE_UP_CONFIRM=1.
EOF
	exit 2
fi
start_all=$(date +%s)
if [ ! -d "$STATE" ]; then
	# A fresh start: nothing of another Kubernetes or CNI may be here, since
	# down.sh removes every KUBE-*/CNI-* chain and cni-* namespace as ours.
	if { iptables-save; ip6tables-save; } 2>/dev/null | grep -q -E '^:(KUBE|CNI)-'; then
		echo "kube-up: iptables already has KUBE-/CNI- chains (another cluster?); refusing" >&2; exit 1
	fi
	if ls /run/netns/cni-* >/dev/null 2>&1; then
		echo "kube-up: /run/netns already has cni-* namespaces; refusing" >&2; exit 1
	fi
	mkdir -p "$STATE"
	# down.sh removes the nftables tables iptables-nft creates for the
	# cluster, and only those: the ones that exist now stay.
	if command -v nft >/dev/null; then nft list tables >"$STATE/nft-tables.before" 2>/dev/null || :; fi
	for d in /run/containerd /run/netns; do
		[ -e "$d" ] || touch "$STATE/made$(echo "$d" | tr / -)"
	done
fi
mkdir -p "$RUN" "$LOGS" "$PKI" "$CNI_CONF" "$ROOT/bin"

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kube-router; do
	[ -x "$BIN/$b" ] || { echo "kube-up: $BIN/$b missing: run deploy/kube/build.sh first" >&2; exit 1; }
done
for c in containerd runc iptables ipset conntrack openssl; do
	command -v "$c" >/dev/null || { echo "kube-up: $c missing: apt-get install $DEBIAN_PACKAGES" >&2; exit 1; }
done
ln -sf "$BIN/kubectl" "$KUBECTL"

# ---- sysctls and the bridge (recorded for down.sh) ----------------------
if [ ! -f "$STATE/sysctl.saved" ]; then
	{
		echo "net.ipv4.ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)"
		echo "net.bridge.bridge-nf-call-iptables=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)"
	} >"$STATE/sysctl.saved"
fi
sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
	ip link add "$BRIDGE" type bridge
	ip addr add "$BRIDGE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	klog "bridge $BRIDGE $BRIDGE_IP"
fi

# put FILE: writes stdin to FILE only when it differs, so that a second
# kube-up leaves the files of running processes untouched (kube-proxy exits
# when its configuration file is written, even with the same content).
put() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

# ---- PKI ------------------------------------------------------------------
# cert NAME CN O [SAN]: NAME.crt/.key signed by the cluster CA (ca), or by
# front-proxy-ca for front-proxy-client.
cert() {
	local name=$1 cn=$2 o=$3 san=${4:-} ca=ca
	[ -f "$PKI/$name.crt" ] && return
	[ "$name" = front-proxy-client ] && ca=front-proxy-ca
	openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
	local subj="/CN=$cn"
	[ -n "$o" ] && subj="/O=$o$subj"
	local ext
	ext=$(mktemp)
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$san" ]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$ext"
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
		-days 30 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$ext" "$PKI/$name.csr"
}
for ca in ca front-proxy-ca; do
	if [ ! -f "$PKI/$ca.crt" ]; then
		openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/$ca.key" -out "$PKI/$ca.crt" -days 30 \
			-subj "/CN=riftflow-kube-$ca" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	fi
done
[ -f "$PKI/sa.key" ] || { openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null; openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; }
cert apiserver kube-apiserver "" "IP:$BRIDGE_IP,IP:$API_SVC_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
cert front-proxy-client front-proxy-client ""
cert admin kubernetes-admin system:masters
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
cert kubelet "system:node:$NODE" system:nodes
cert kubelet-serving "system:node:$NODE" system:nodes "IP:$BRIDGE_IP,DNS:$NODE"
cert kube-proxy system:kube-proxy ""
cert kube-router system:kube-router ""

# kubeconfig NAME USER-CERT: a kubeconfig for the cluster as that client.
kubeconfig() {
	local f=$1 c=$2
	put "$f" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: riftflow-kube
    cluster:
      server: https://$BRIDGE_IP:$API_PORT
      certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
  - name: $c
    user:
      client-certificate-data: $(base64 -w0 "$PKI/$c.crt")
      client-key-data: $(base64 -w0 "$PKI/$c.key")
contexts:
  - name: riftflow-kube
    context: {cluster: riftflow-kube, user: $c}
current-context: riftflow-kube
EOF
	chmod 600 "$f"
}
kubeconfig "$KUBECONFIG_ADMIN" admin
for c in controller-manager scheduler kubelet kube-proxy kube-router; do kubeconfig "$STATE/$c.kubeconfig" "$c"; done

# start NAME CMD...: runs CMD in its own session, logging to logs/NAME.log,
# unless the pidfile's process still runs.
start() {
	local name=$1; shift
	if alive "$name"; then klog "$name already running (pid $(cat "$RUN/$name.pid"))"; return; fi
	setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$RUN/$name.pid"
	klog "$name started (pid $!, log $LOGS/$name.log)"
}
# wait_for WHAT SECONDS CMD...: CMD succeeds within SECONDS, or fail.
wait_for() {
	local what=$1 n=$2; shift 2
	for _ in $(seq "$n"); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 1
	done
	echo "kube-up: $what not ready after ${n}s; see $LOGS" >&2
	return 1
}

# ---- containerd -----------------------------------------------------------
mkdir -p "$STATE/containerd/root" "$STATE/containerd/state" "$STATE/cni/ipam"
put "$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "riftflow.local/pause:3.10"
  enable_selinux = false
  # This machine's root lacks CAP_SYS_RESOURCE (a sandboxed VM), so no
  # process may lower its oom_score_adj: kubelet's -998 for sandboxes
  # and -997 for Guaranteed pods would fail every runc create with
  # "can't get final child's PID from pipe". containerd clamps them to
  # its own score instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$CNI_CONF"
EOF
put "$CNI_CONF/10-riftflow.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "riftflow-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
start containerd containerd --config "$STATE/containerd.toml"
wait_for containerd 60 ctr -a "$CONTAINERD_SOCK" version

# Images: every tarball of build.sh, imported once per content.
for tar in "$IMG"/*.tar; do
	[ -f "$tar" ] || continue
	sum=$(sha256sum "$tar" | cut -c1-16)
	mark=$STATE/imported/$(basename "$tar").$sum
	[ -f "$mark" ] && continue
	ctr_ images import "$tar" >/dev/null
	mkdir -p "$STATE/imported"; touch "$mark"
	klog "image $(basename "$tar") imported"
done

# ---- etcd and the control plane --------------------------------------------
start etcd etcd --name riftflow-kube --data-dir "$STATE/etcd" \
	--listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
	--listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
	--initial-cluster "riftflow-kube=http://$ETCD_PEER" --listen-metrics-urls "" --log-level warn
wait_for etcd 60 curl -fsS "http://$ETCD_CLIENT/health"

start kube-apiserver kube-apiserver \
	--advertise-address="$BRIDGE_IP" --bind-address="$BRIDGE_IP" --secure-port="$API_PORT" \
	--etcd-servers="http://$ETCD_CLIENT" \
	--service-cluster-ip-range="$SVC_CIDR" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
	--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
	--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction,PodSecurity \
	--allow-privileged=true \
	--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
	--requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-group-headers=X-Remote-Group \
	--requestheader-username-headers=X-Remote-User \
	--proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
	--enable-aggregator-routing=true --v=1
wait_for kube-apiserver 180 kc get --raw /readyz

start kube-controller-manager kube-controller-manager \
	--kubeconfig="$STATE/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
	--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
	--root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
	--use-service-account-credentials=true --service-cluster-ip-range="$SVC_CIDR" \
	--cluster-cidr="$POD_CIDR" --allocate-node-cidrs=true --node-cidr-mask-size=24 --v=1
start kube-scheduler kube-scheduler \
	--kubeconfig="$STATE/scheduler.kubeconfig" \
	--authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
	--authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --v=1

# ---- the node ---------------------------------------------------------------
mkdir -p "$STATE/kubelet"
put "$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $BRIDGE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: /etc/resolv.conf
maxPods: 110
serializeImagePulls: false
evictionHard:
  memory.available: 200Mi
  nodefs.available: 5%
  imagefs.available: 5%
imageGCHighThresholdPercent: 98
imageGCLowThresholdPercent: 95
EOF
start kubelet kubelet --config="$STATE/kubelet.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
	--root-dir="$STATE/kubelet" --hostname-override="$NODE" --node-ip="$BRIDGE_IP" --v=1

put "$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: $BRIDGE_IP
healthzBindAddress: $PROXY_HEALTHZ
metricsBindAddress: $PROXY_METRICS
nodePortAddresses: [$BRIDGE_IP/32]
clientConnection:
  kubeconfig: $STATE/kube-proxy.kubeconfig
conntrack:
  maxPerCore: 0
iptables:
  localhostNodePorts: false
EOF
start kube-proxy kube-proxy --config="$STATE/kube-proxy.yaml" --v=1

wait_for "node $NODE" 180 kc wait --for=condition=Ready "node/$NODE" --timeout=1s

# RBAC of the node's own clients that have no built-in binding.
kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: riftflow-kube:kube-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-proxier}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-proxy}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: riftflow-kube:kube-router}
rules:
  - apiGroups: [""]
    resources: [namespaces, pods, services, nodes, endpoints]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: riftflow-kube:kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: riftflow-kube:kube-router}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-router}]
EOF

start kube-router kube-router --kubeconfig="$STATE/kube-router.kubeconfig" --hostname-override="$NODE" \
	--run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
	--health-port="$ROUTER_HEALTH" --metrics-port=0 --v=1

# ---- in the cluster ---------------------------------------------------------
kc apply -f "$ROOT/deploy/kube/addons/" >/dev/null
klog "addons applied (CoreDNS, local volumes)"
# Local PersistentVolumes: directories on this node, bound on first use.
for i in $(seq 1 12); do
	mkdir -p "$STATE/volumes/pv$i"
	chmod 0777 "$STATE/volumes/pv$i"
	kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: riftflow-kube-pv$i
  labels: {riftflow.io/kube: "1"}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: $STATE/volumes/pv$i}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE]}]
EOF
done

# prometheus-operator's CRDs (PodMonitor, PrometheusRule), from its module
# at the version deploy/internal/schemagen pins.
promop=$(cd /tmp && GOWORK=off GOFLAGS= go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
for crd in podmonitors prometheusrules servicemonitors; do
	kc apply --server-side -f "$promop/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" >/dev/null
done
klog "prometheus-operator CRDs ($PROMETHEUS_OPERATOR_VERSION)"

# KEDA from its own config/ (kustomize) at the pinned version, with the
# images build.sh made and no admission webhooks.
keda=$(cd /tmp && GOWORK=off GOFLAGS= go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
rm -rf "$STATE/keda"; mkdir -p "$STATE/keda"
cp -r "$keda/config" "$STATE/keda/config"; chmod -R u+w "$STATE/keda"
cat >"$STATE/keda/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - config/crd
  - config/general
  - config/rbac
  - config/manager
  - config/metrics-server
  - config/service_account
images:
  - name: ghcr.io/kedacore/keda
    newName: riftflow.local/keda
    newTag: "${KEDA_VERSION#v}"
  - name: ghcr.io/kedacore/keda-metrics-apiserver
    newName: riftflow.local/keda-metrics-apiserver
    newTag: "${KEDA_VERSION#v}"
patches:
  - target: {kind: Deployment}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
EOF
kc apply --server-side -k "$STATE/keda" >/dev/null
klog "KEDA $KEDA_VERSION applied"

wait_for CoreDNS 240 kc -n kube-system rollout status deploy/coredns --timeout=1s
wait_for KEDA 300 kc -n keda rollout status deploy/keda-operator --timeout=1s
wait_for "KEDA metrics API" 300 kc get --raw /apis/external.metrics.k8s.io/v1beta1
klog "cluster up in $(($(date +%s) - start_all))s; kubeconfig $KUBECONFIG_ADMIN, kubectl bin/kubectl"
