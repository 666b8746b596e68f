#!/usr/bin/env bash
# deploy/kube/e2e.sh (`make kube-e2e`): applies deploy/overlays/local to the
# cluster of `make kube-up` and checks it, printing each step.
set -euo pipefail
. "$(dirname "$0")/env.sh"
[ -f "$KUBECONFIG_ADMIN" ] || { echo "kube-e2e: no cluster: run make kube-up" >&2; exit 1; }
step() { printf '\n=== %s\n' "$*"; }
pass() { printf -- '--- PASS: %s\n' "$*"; }
fail() { printf -- '--- FAIL: %s\n' "$*"; exit 1; }

step "cluster reachable, node Ready"
kc wait --for=condition=Ready "node/$NODE" --timeout=60s >/dev/null || fail "node $NODE not Ready"
pass "node $NODE Ready"
echo "kube-e2e: the remaining steps (overlays/local: NATS, migrate Job, KEDA scaling) are not written yet" >&2
exit 1
