#!/usr/bin/env bash
# deploy/kube/e2e.sh (`make kube-e2e`): applies deploy/overlays/local to the
# cluster of `make kube-up` and checks it, printing each step as
# "=== step" and "--- PASS"/"--- FAIL". docs/runbook.md ("A local cluster")
# follows the same steps for an operator with a real cluster.
#
# Written so far: the node, the out-of-band Secrets (NATS TLS and users,
# riot-api), NATS from deploy/nats/rendered/local.yaml, the overlay with its
# migrate Job and every Deployment Available, Pod Security rejecting a root
# pod, the first API token made inside the cluster, Postgres unreachable
# from another namespace, one ingest through the API compared with the
# simulator's truth. Not written yet (the script says so and exits 1):
# the ingest by a NATS publish, KEDA scaling under a backlog,
# the scheduled jobs, WebSocket progress, pod deletion under load, the
# Jaeger trace, NATS unreachable from another namespace.
set -euo pipefail
. "$(dirname "$0")/env.sh"
[ -f "$KUBECONFIG_ADMIN" ] || { echo "kube-e2e: no cluster: run make kube-up" >&2; exit 1; }
step() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
pass() { printf -- '--- PASS: %s\n' "$*"; }
fail() { printf -- '--- FAIL: %s\n' "$*"; exit 1; }
NS=riftflow
E2E=$STATE/e2e
mkdir -p "$E2E"

step "node Ready"
kc wait --for=condition=Ready "node/$NODE" --timeout=60s >/dev/null || fail "node $NODE not Ready"
pass "node $NODE Ready"

step "namespaces and the out-of-band Secrets (as docs/runbook.md, prod)"
kc create namespace nats --dry-run=client -o yaml | kc apply -f - >/dev/null
kc create namespace "$NS" --dry-run=client -o yaml | kc apply -f - >/dev/null
if [ ! -f "$E2E/ca.crt" ]; then
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$E2E/ca.key" -out "$E2E/ca.crt" -days 7 \
		-subj /CN=riftflow-kube-nats-ca -addext keyUsage=critical,keyCertSign 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout "$E2E/tls.key" -out "$E2E/tls.csr" -subj /CN=nats 2>/dev/null
	printf 'subjectAltName=DNS:nats,DNS:nats.nats,DNS:nats.nats.svc,DNS:nats.nats.svc.cluster.local,DNS:*.nats-headless,DNS:*.nats-headless.nats,DNS:*.nats-headless.nats.svc,DNS:*.nats-headless.nats.svc.cluster.local\nextendedKeyUsage=serverAuth,clientAuth\n' >"$E2E/ext"
	openssl x509 -req -in "$E2E/tls.csr" -CA "$E2E/ca.crt" -CAkey "$E2E/ca.key" -CAcreateserial -days 7 \
		-extfile "$E2E/ext" -out "$E2E/tls.crt" 2>/dev/null
	for u in RESOLVER MATCHID_LISTER MATCH_FETCHER PERSISTER RETRY_SWEEPER RIFTFLOW WEB ADMIN; do
		echo "NATS_PASSWORD_$u=$(openssl rand -hex 32)"
	done >"$E2E/nats-users.env"
	chmod 600 "$E2E"/*
fi
tls=(--from-file=tls.crt="$E2E/tls.crt" --from-file=tls.key="$E2E/tls.key" --from-file=ca.crt="$E2E/ca.crt")
secret() { local ns=$1; shift; kc -n "$ns" create secret generic "$@" --dry-run=client -o yaml | kc apply -f - >/dev/null; }
secret nats nats-server-tls "${tls[@]}"
secret nats nats-cluster-tls "${tls[@]}"
secret nats nats-users --from-env-file="$E2E/nats-users.env"
secret "$NS" nats-users --from-env-file="$E2E/nats-users.env"
secret "$NS" nats-ca --from-file=ca.crt="$E2E/ca.crt"
secret "$NS" riot-api --from-literal=RIOT_API_KEY=RGAPI-riftflow-local-simulator
pass "Secrets nats-server-tls, nats-cluster-tls, nats-users (nats, $NS), nats-ca, riot-api"

step "NATS: 3 JetStream servers (chart rendered in deploy/nats/rendered/local.yaml)"
kc apply -n nats -f "$ROOT/deploy/nats/rendered/local.yaml" >/dev/null
kc apply -f "$ROOT/deploy/nats/networkpolicy.yaml" >/dev/null
kc -n nats rollout status statefulset/nats --timeout=10m || fail "NATS StatefulSet not ready"
pass "NATS ready: $(kc -n nats get pods -l app.kubernetes.io/name=nats --no-headers | wc -l) pods"

step "apply deploy/overlays/local; the migrate Job completes"
kc apply -k "$ROOT/deploy/overlays/local" >/dev/null
kc -n "$NS" wait --for=condition=complete job/riftflow-migrate-local --timeout=10m ||
	{ kc -n "$NS" logs job/riftflow-migrate-local --all-containers | tail -20; fail "migrate Job did not complete"; }
pass "job/riftflow-migrate-local complete"

step "every Deployment Available with the readiness it claims"
for d in $(kc -n "$NS" get deploy -o name); do
	kc -n "$NS" rollout status "$d" --timeout=10m >/dev/null || fail "$d not Available"
	echo "    $d: $(kc -n "$NS" get "$d" -o jsonpath='{.status.readyReplicas}/{.spec.replicas} ready')"
done
pass "every Deployment of namespace $NS Available"

# podspec UID IMAGE ARGS-JSON: a pod spec that meets the restricted Pod
# Security standard in everything but, possibly, its user.
podspec() {
	local nonroot=true
	[ "$1" = 0 ] && nonroot=false
	printf '{"apiVersion":"v1","spec":{"automountServiceAccountToken":false,"securityContext":{"runAsUser":%s,"runAsNonRoot":%s,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"probe","image":"%s","imagePullPolicy":"Never","command":%s,"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}' \
		"$1" "$nonroot" "$2" "$3"
}

step "Pod Security (restricted) rejects a pod running as root, admits the same pod as non-root"
if out=$(kc -n "$NS" run e2e-root --image=riftflow/riftflow:local --restart=Never --dry-run=server \
	--overrides="$(podspec 0 riftflow/riftflow:local '["/app","version"]')" 2>&1); then
	fail "a root pod was admitted: $out"
fi
echo "$out" | grep -q 'violates PodSecurity "restricted' || fail "rejected, but not by Pod Security: $out"
kc -n "$NS" run e2e-nonroot --image=riftflow/riftflow:local --restart=Never --dry-run=server \
	--overrides="$(podspec 65532 riftflow/riftflow:local '["/app","version"]')" >/dev/null ||
	fail "the same pod as uid 65532 was rejected too: the root check proves nothing"
pass "root rejected: $(echo "$out" | head -c 200)"

step "the first API token, made inside the cluster (docs/runbook.md)"
TOKEN=$(kc -n "$NS" exec deploy/riftflow-api -- /app token create --name kube-e2e --scopes admin | grep -o 'rft_[A-Za-z0-9_-]*')
[ -n "$TOKEN" ] || fail "no token printed"
pass "token ${TOKEN:0:8}… created"

# pgprobe NS: pg_isready against the Postgres Service from a pod of NS.
pgprobe() {
	kc -n "$1" run "pg-probe-$RANDOM" --rm -i --restart=Never --image=riftflow.local/postgres:15 --pod-running-timeout=2m \
		--overrides="$(podspec 999 riftflow.local/postgres:15 \
			'["/usr/lib/postgresql/15/bin/pg_isready","-t","5","-h","postgres.'"$NS"'.svc.cluster.local","-p","5432"]')" >/dev/null 2>&1
}
step "Postgres is reachable from namespace $NS and not from another namespace"
pgprobe "$NS" || fail "pg_isready from namespace $NS fails: the probe itself does not work"
kc create namespace riftflow-e2e-outside --dry-run=client -o yaml | kc apply -f - >/dev/null
if pgprobe riftflow-e2e-outside; then
	fail "a pod of namespace riftflow-e2e-outside reached Postgres"
fi
pass "pg_isready: accepted from $NS, no answer from riftflow-e2e-outside (NetworkPolicy postgres)"

# forward NAME SVC LOCAL:REMOTE: a kubectl port-forward on 127.0.0.1,
# stopped when the script exits.
forwards=()
trap 'for p in "${forwards[@]}"; do kill "$p" 2>/dev/null; done' EXIT
forward() {
	kc -n "$NS" port-forward --address 127.0.0.1 "svc/$2" "$3" >"$E2E/forward-$1.log" 2>&1 &
	forwards+=($!)
	for _ in $(seq 30); do curl -s -o /dev/null "http://127.0.0.1:${3%%:*}/" && return 0; sleep 1; done
	fail "port-forward to svc/$2 did not come up"
}
forward api riftflow-api 18080:80
forward sim riot-sim 18099:8099
API=http://127.0.0.1:18080
SIM=http://127.0.0.1:18099
psql_() { kc -n "$NS" exec postgres-0 -- /usr/lib/postgresql/15/bin/psql -U riftflow -d riftflow -tAc "$1"; }

step "ingest one player through the API; Postgres ends with the simulator's truth, nothing duplicated"
player=$(curl -fsS "$SIM/sim/players" | jq -c '[.[] | select(.puuid | startswith("synth-"))][0]')
puuid=$(echo "$player" | jq -r .puuid); platform=$(echo "$player" | jq -r .platform)
want=$(curl -fsS "$SIM/sim/truth" | jq --arg p "$puuid" '[.players[$p].matches[] | select(.matchOk)] | length')
req=$(curl -fsS -XPOST "$API/v1/sync" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
	-d "{\"puuid\":\"$puuid\",\"platform\":\"$platform\",\"mode\":\"full\",\"lookback_days\":730,\"count\":1000}" | jq -r .request_id)
[ -n "$req" ] && [ "$req" != null ] || fail "POST /v1/sync gave no request_id"
got=0
for _ in $(seq 600); do
	got=$(psql_ "SELECT count(*) FROM match_participants WHERE puuid = '$puuid'")
	[ "$got" = "$want" ] && break
	sleep 2
done
[ "$got" = "$want" ] || fail "player ${puuid:0:12}: $got of $want fetchable matches stored after 20 min"
dups=$(psql_ "SELECT count(*) - count(DISTINCT (match_id, puuid)) FROM match_participants WHERE puuid = '$puuid'")
[ "$dups" = 0 ] || fail "$dups duplicated participant rows"
pass "request $req: $got of $want matches of ${puuid:0:12} stored, none twice"

step "NOT WRITTEN YET: ingest through a NATS publish vs the simulator's truth; KEDA scaling under a backlog; rank and weekly jobs; WebSocket progress; NATS/fetcher pod deletion under load; one ingest = one Jaeger trace"
fail "kube-e2e is incomplete (see the list above)"
