# deploy/kube/env.sh: the one-node cluster's names, addresses and paths,
# sourced by up.sh, down.sh and e2e.sh. Every address is on loopback or on
# the cluster's own bridge; every port is below the kernel's ephemeral range
# (32768+), so nothing collides with the host's services (Postgres 5432,
# NATS 4222) or with test processes on random ports.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=versions.env
. "$ROOT/deploy/kube/versions.env"
DATA=${KUBE_DATA:-$ROOT/.data/kube}
BIN=$DATA/bin         # cached host binaries (build.sh)
IMG=$DATA/images      # cached image tarballs (build.sh)
STATE=$DATA/state     # everything a running cluster writes; down.sh removes it
RUN=$STATE/run        # pidfiles and sockets
LOGS=$DATA/logs
PKI=$STATE/pki
KUBECONFIG_ADMIN=$DATA/kubeconfig
NODE=riftflow-kube
BRIDGE=rfkube0
BRIDGE_IP=172.31.217.1
POD_CIDR=172.31.217.0/24
SVC_CIDR=172.31.218.0/24
API_SVC_IP=172.31.218.1
DNS_IP=172.31.218.10
API_PORT=16443
ETCD_CLIENT=127.0.0.1:12379
ETCD_PEER=127.0.0.1:12380
KUBELET_PORT=20250
KUBELET_HEALTHZ=20248
KCM_PORT=20257
SCHED_PORT=20259
PROXY_METRICS=127.0.0.1:20249
PROXY_HEALTHZ=127.0.0.1:20256
ROUTER_HEALTH=20245
CONTAINERD_SOCK=$RUN/containerd.sock
CNI_BIN=/usr/lib/cni
CNI_CONF=$STATE/cni/net.d
KUBECTL=$ROOT/bin/kubectl
export PATH=$BIN:$PATH

klog() { printf '%s kube: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr_() { ctr -a "$CONTAINERD_SOCK" -n k8s.io "$@"; }

# alive NAME: the process of pidfile NAME runs.
alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
