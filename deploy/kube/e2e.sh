#!/usr/bin/env bash
# deploy/kube/e2e.sh (`make kube-e2e`): applies deploy/overlays/local to the
# cluster of `make kube-up` and checks it, printing each step as
# "=== step" and "--- PASS"/"--- FAIL". docs/runbook.md ("A local cluster")
# follows the same steps for an operator with a real cluster.
#
# Steps: the node; the out-of-band Secrets (NATS TLS and users, riot-api);
# NATS from deploy/nats/rendered/local.yaml; the overlay, its migrate Job
# and every Deployment Available; Pod Security rejecting a root pod; the
# first API token made inside the cluster; Postgres and NATS unreachable
# from another namespace; an ingest through the API and one by a NATS
# publish (with its progress seen by a WebSocket client) compared with the
# simulator's truth; KEDA scaling match-fetcher-americas and the persister
# under a backlog of 4,000 matches while a NATS pod and a fetcher pod are
# deleted (replicas over time in .data/kube/logs/kube-e2e-replicas.tsv);
# the rank job and the weekly report; one ingest as one Jaeger trace; no
# client-caused 429 from the simulator.
set -euo pipefail
. "$(dirname "$0")/env.sh"
[ -f "$KUBECONFIG_ADMIN" ] || { echo "kube-e2e: no cluster: run make kube-up" >&2; exit 1; }
step() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
pass() { printf -- '--- PASS: %s\n' "$*"; }
fail() { printf -- '--- FAIL: %s\n' "$*"; exit 1; }
# fail_later: a FAIL that does not stop the steps after it (their own
# results stay worth seeing); the script still exits 1 at its end.
failures=()
fail_later() { printf -- '--- FAIL: %s\n' "$*"; failures+=("$*"); }
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

# Background processes (port-forwards, the WebSocket client, the replica
# recorder), stopped when the script exits.
bgpids=()
trap 'for p in "${bgpids[@]}"; do kill "$p" 2>/dev/null || :; done' EXIT
trap 'exit 143' TERM INT

# podrun NS NAME IMAGE SECONDS OVERRIDES-JSON: runs a one-off pod to its end
# (at most SECONDS) and prints its log; succeeds when the pod Succeeded.
# (kubectl run --rm -i loses the output of a container that exits before
# kubectl attaches.)
podrun() {
	local ns=$1 name=$2 phase=""
	kc -n "$ns" delete pod "$name" --ignore-not-found --wait=true >/dev/null 2>&1
	kc -n "$ns" run "$name" --restart=Never --image="$3" --overrides="$5" >/dev/null || return 1
	for _ in $(seq "$4"); do
		phase=$(kc -n "$ns" get pod "$name" -o jsonpath='{.status.phase}' 2>/dev/null)
		case $phase in Succeeded | Failed) break ;; esac
		sleep 1
	done
	kc -n "$ns" logs "$name" 2>&1
	kc -n "$ns" delete pod "$name" --wait=false >/dev/null 2>&1
	[ "$phase" = Succeeded ]
}

# probepod NS NAME: a pod of NS from the Postgres image that only waits (its
# shell reads an open stdin), for netprobe to exec psql in.
probepod() {
	kc -n "$1" delete pod "$2" --ignore-not-found --wait=true >/dev/null 2>&1
	kc -n "$1" run "$2" --restart=Never --image=riftflow.local/postgres:15 \
		--overrides="$(podspec 999 riftflow.local/postgres:15 '["/bin/sh","-c","read x"]' | jq -c '.spec.containers[0].stdin = true')" >/dev/null
}
# netprobe NS POD HOST PORT: what POD of NS meets when it opens a TCP
# connection to HOST:PORT and speaks the Postgres protocol (psql):
# "postgres" when a Postgres server answered, "nats" when a NATS server's
# INFO line came back instead, "timeout" when nothing answered within 5 s,
# "refused" (kube-router rejects what a NetworkPolicy denies with ICMP
# port-unreachable); otherwise psql's last line.
netprobe() {
	local out
	out=$(kc -n "$1" exec "$2" -- /usr/lib/postgresql/15/bin/psql -w \
		"host=$3 port=$4 user=probe dbname=probe sslmode=disable connect_timeout=5" -c 'SELECT 1' 2>&1)
	case $out in
	*'received I'*) echo nats ;;
	*'no password supplied'* | *'password authentication failed'* | *'does not exist'* | *'pg_hba.conf'*) echo postgres ;;
	*'timeout expired'*) echo timeout ;;
	*'Connection refused'*) echo refused ;;
	*) echo "other: $(echo "$out" | tail -1)" ;;
	esac
}
step "Postgres and NATS are reachable from namespace $NS and not from another namespace (NetworkPolicies)"
kc create namespace riftflow-e2e-outside --dry-run=client -o yaml | kc apply -f - >/dev/null
PG_HOST=postgres.$NS.svc.cluster.local NATS_HOST=nats.nats.svc.cluster.local
probepod "$NS" e2e-probe-inside
probepod riftflow-e2e-outside e2e-probe-outside
kc -n "$NS" wait --for=condition=Ready pod/e2e-probe-inside --timeout=2m >/dev/null || fail "probe pod of $NS not Ready"
kc -n riftflow-e2e-outside wait --for=condition=Ready pod/e2e-probe-outside --timeout=2m >/dev/null || fail "probe pod of riftflow-e2e-outside not Ready"
# kube-router admits a new pod's address once it has synced its ipsets: the
# pod of the namespace is asked again until it gets through (at most 60 s),
# and only then the outside pod, three times.
for _ in $(seq 30); do
	in_pg=$(netprobe "$NS" e2e-probe-inside "$PG_HOST" 5432)
	in_nats=$(netprobe "$NS" e2e-probe-inside "$NATS_HOST" 4222)
	[ "$in_pg" = postgres ] && [ "$in_nats" = nats ] && break
	sleep 2
done
echo "    from $NS: postgres:5432 $in_pg, nats:4222 $in_nats"
[ "$in_pg" = postgres ] && [ "$in_nats" = nats ] || fail "the probe does not reach Postgres and NATS from $NS: it proves nothing"
for i in 1 2 3; do
	out_pg=$(netprobe riftflow-e2e-outside e2e-probe-outside "$PG_HOST" 5432)
	out_nats=$(netprobe riftflow-e2e-outside e2e-probe-outside "$NATS_HOST" 4222)
	echo "    from riftflow-e2e-outside ($i): postgres:5432 $out_pg, nats:4222 $out_nats"
	case $out_pg in timeout | refused) ;; *) fail "a pod of riftflow-e2e-outside reached Postgres ($out_pg)" ;; esac
	case $out_nats in timeout | refused) ;; *) fail "a pod of riftflow-e2e-outside reached NATS ($out_nats)" ;; esac
	sleep 2
done
kc -n "$NS" delete pod e2e-probe-inside --wait=false >/dev/null
kc -n riftflow-e2e-outside delete pod e2e-probe-outside --wait=false >/dev/null
pass "Postgres and NATS answer a pod of $NS; a pod of riftflow-e2e-outside is $out_pg by Postgres and $out_nats by NATS"

# forward NAME NAMESPACE SVC LOCAL:REMOTE: a kubectl port-forward on
# 127.0.0.1, stopped when the script exits.
forward() {
	kc -n "$2" port-forward --address 127.0.0.1 "svc/$3" "$4" >"$E2E/forward-$1.log" 2>&1 &
	bgpids+=($!)
	for _ in $(seq 30); do curl -s -o /dev/null "http://127.0.0.1:${4%%:*}/" && return 0; sleep 1; done
	fail "port-forward to svc/$3 did not come up"
}
forward api "$NS" riftflow-api 18080:80
forward sim "$NS" riot-sim 18099:8099
API=http://127.0.0.1:18080
SIM=http://127.0.0.1:18099
psql_() { kc -n "$NS" exec postgres-0 -- /usr/lib/postgresql/15/bin/psql -U riftflow -d riftflow -tAc "$1"; }
curl -fsS "$SIM/sim/truth" >"$E2E/truth.json" || fail "GET /sim/truth"
violations() { curl -fsS "$SIM/sim/stats" | jq .violations; }
# why429: where the simulator's client-caused 429s came from, into
# $LOGS/kube-e2e-why429.txt (its log lines and every ended window instance over its
# limit on americas), printed indented.
why429() {
	{
		echo "simulator log (client-caused 429s):"
		kc -n "$NS" logs deploy/riot-sim --tail=-1 2>/dev/null | grep 'client-caused 429' | tail -20
		for secs in 1 10 600; do
			lim=$(curl -fsS "$SIM/sim/stats" | jq -r --argjson s "$secs" '[.buckets[] | select(.route == "americas" and .method == null and .windowSeconds == $s) | .limit][0] // empty')
			[ -n "$lim" ] || continue
			echo "americas ${secs}s window instances over $lim:"
			curl -fsS "$SIM/sim/windows?route=americas&secs=$secs" | jq -c --argjson l "$lim" '.[] | select(.count > $l)'
		done
		echo "pods deleted: ${deleted:-none}"
	} >"$LOGS/kube-e2e-why429.txt" 2>&1
	sed 's/^/    /' "$LOGS/kube-e2e-why429.txt"
}

# synth I: the PUUID of the simulator's synthetic player I (sim.SyntheticPUUID, platform na1).
synth() {
	local s
	s=$(printf 'synth-na1-%06d-' "$1")
	printf '%s%s' "$s" "$(head -c $((78 - ${#s})) /dev/zero | tr '\0' x)"
}
want() { jq --arg p "$1" '[.players[$p].matches[] | select(.matchOk)] | length' "$E2E/truth.json"; }
stored() { psql_ "SELECT count(*) FROM match_participants WHERE puuid = '$1'"; }
dups() { psql_ "SELECT count(*) - count(DISTINCT (match_id, puuid)) FROM match_participants WHERE puuid = '$1'"; }
# sync BODY-JSON: POST /v1/sync with the token; prints the request id.
# A 409 (the account is still syncing, e.g. timeline retries of an earlier
# run) is asked again every 5 s for at most 5 min.
sync() {
	local out code
	for _ in $(seq 60); do
		out=$(curl -sS -XPOST "$API/v1/sync" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
			-d "$1" -w '\n%{http_code}')
		code=${out##*$'\n'}
		case $code in
		202) echo "${out%$'\n'*}" | jq -r .request_id; return 0 ;;
		409) sleep 5 ;;
		*) echo "POST /v1/sync: $code ${out%$'\n'*}" >&2; return 1 ;;
		esac
	done
	echo "POST /v1/sync: still 409 after 5 min: ${out%$'\n'*}" >&2
	return 1
}
# stored_all PUUID...: every player's stored matches equal the simulator's truth.
stored_all() {
	local p
	for p in "$@"; do [ "$(stored "$p")" = "$(want "$p")" ] || return 1; done
}
# jobs_done ID...: every sync job finished (completed or failed).
jobs_done() {
	local ids
	ids=$(printf "'%s'," "$@")
	[ "$(psql_ "SELECT count(*) FROM jobs WHERE id IN (${ids%,}) AND status IN ('completed', 'failed')")" = "$#" ]
}

step "ingest one player through the API; Postgres ends with the simulator's truth, nothing duplicated"
p1=$(synth 1)
req=$(sync "{\"puuid\":\"$p1\",\"platform\":\"na1\",\"mode\":\"full\",\"lookback_days\":730,\"count\":1000}")
[ -n "$req" ] && [ "$req" != null ] || fail "POST /v1/sync gave no request_id"
t0=$(date +%s)
for _ in $(seq 300); do stored_all "$p1" && break; sleep 2; done
stored_all "$p1" || fail "player ${p1:0:16}: $(stored "$p1") of $(want "$p1") fetchable matches stored after 10 min"
[ "$(dups "$p1")" = 0 ] || fail "$(dups "$p1") duplicated participant rows"
pass "request $req: $(stored "$p1") of $(want "$p1") matches of ${p1:0:16} stored in $(($(date +%s) - t0))s, none twice"

# cli NAME ARGS-JSON: the riftflow CLI as a one-off pod of namespace NS (at most 25 min)
# (docs/runbook.md): the API's environment, NATS user riftflow, the NATS CA.
# kube-router admits a new pod's address to NetworkPolicy-guarded servers
# only once it has synced its rules, a few seconds after the pod started,
# and the CLI's first NATS connection would be refused before that: an init
# container (the Postgres image's shell and psql) waits until NATS answers
# the pod (netprobe's "received I").
cli() {
	local envfrom pgsecret
	envfrom=$(kc -n "$NS" get deploy riftflow-api -o jsonpath='{.spec.template.spec.containers[0].envFrom}')
	pgsecret=$(kc -n "$NS" get deploy riftflow-api -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="DATABASE_URL")].valueFrom.secretKeyRef.name}')
	podrun "$NS" "$1" riftflow/riftflow:local 1500 "$(jq -nc --arg name "$1" --argjson args "$2" --argjson envfrom "$envfrom" --arg pg "$pgsecret" '{
			apiVersion: "v1",
			spec: {
				automountServiceAccountToken: false,
				securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: "RuntimeDefault"}},
				initContainers: [{
					name: "wait-for-nats", image: "riftflow.local/postgres:15", imagePullPolicy: "Never",
					command: ["/bin/sh", "-c", "i=0; while [ $i -lt 3000 ]; do case $(/usr/lib/postgresql/15/bin/psql -w \"host=nats.nats.svc.cluster.local port=4222 user=probe sslmode=disable connect_timeout=5\" 2>&1) in *\"received I\"*) exit 0;; esac; i=$((i+1)); done; exit 1"],
					securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: ["ALL"]}}}],
				containers: [{
					name: $name, image: "riftflow/riftflow:local", imagePullPolicy: "Never", args: $args,
					envFrom: $envfrom,
					env: [{name: "NATS_USER", value: "riftflow"},
						{name: "NATS_PASSWORD", valueFrom: {secretKeyRef: {name: "nats-users", key: "NATS_PASSWORD_RIFTFLOW"}}},
						{name: "DATABASE_URL", valueFrom: {secretKeyRef: {name: $pg, key: "uri"}}}],
					securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: ["ALL"]}},
					volumeMounts: [{name: "nats-ca", mountPath: "/etc/nats/ca", readOnly: true}]}],
				volumes: [{name: "nats-ca", secret: {secretName: "nats-ca"}}]}}')"
}

step "ingest one player by a NATS publish (riftflow ingest in a pod, as user riftflow); a WebSocket client sees its progress"
p2=$(synth 2)
forward nats-ws nats nats 18222:8080
(cd "$ROOT/deploy" && go build -o "$E2E/wsprobe" ./internal/wsprobe) || fail "deploy/internal/wsprobe does not build"
NATS_PASSWORD=$(sed -n 's/^NATS_PASSWORD_WEB=//p' "$E2E/nats-users.env") "$E2E/wsprobe" -url ws://127.0.0.1:18222 -user web \
	-subject "lol.progress.$p2" -until '"status":"completed"' -timeout 20m >"$E2E/ws.out" 2>"$E2E/ws.err" &
wspid=$!
bgpids+=($wspid)
for _ in $(seq 30); do grep -qs subscribed "$E2E/ws.err" && break; sleep 1; done
grep -qs subscribed "$E2E/ws.err" || fail "WebSocket client: $(cat "$E2E/ws.err")"
t0=$(date +%s)
out=$(cli e2e-ingest "[\"ingest\",\"--puuid\",\"$p2\",\"--platform\",\"na1\",\"--mode\",\"full\",\"--count\",\"1000\",\"--lookback-days\",\"730\",\"--wait\",\"--timeout\",\"20m\"]") ||
	fail "riftflow ingest: $(echo "$out" | tail -5)"
echo "$out" | tail -3 | sed 's/^/    riftflow ingest: /'
for _ in $(seq 300); do stored_all "$p2" && break; sleep 2; done
stored_all "$p2" || fail "player ${p2:0:16}: $(stored "$p2") of $(want "$p2") fetchable matches stored after 10 min"
[ "$(dups "$p2")" = 0 ] || fail "$(dups "$p2") duplicated participant rows"
wsrc=0
wait "$wspid" || wsrc=$?
[ "$wsrc" = 0 ] || fail "WebSocket client: no completed progress event (exit $wsrc): $(tail -2 "$E2E/ws.err")"
pass "$(stored "$p2") of $(want "$p2") matches of ${p2:0:16} stored in $(($(date +%s) - t0))s, none twice; WebSocket (user web, lol.progress.>): $(wc -l <"$E2E/ws.out") progress events, the last $(tail -1 "$E2E/ws.out" | cut -d' ' -f2- | jq -c '{status, progress, total}')"

# replicas: "<fetcher replicas> <persister replicas>" as the Deployments' spec (what KEDA's HPA set).
replicas() { kc -n "$NS" get deploy match-fetcher-americas persister -o jsonpath='{range .items[*]}{.spec.replicas} {end}'; }
# record FILE: every 5 s, one line: time, then for the match-fetcher-americas and
# persister Deployments: replicas (spec), ready, and the lag per replica that
# KEDA's HPA sees for each trigger (background, interactive).
record() {
	printf 'time\tfetcher_americas\tready\tlag_per_replica(bg,int)\tpersister\tready\tlag_per_replica(bg,int)\n' >"$1"
	while :; do
		local d h
		d=$(kc -n "$NS" get deploy match-fetcher-americas persister -o jsonpath='{range .items[*]}{.spec.replicas} {.status.readyReplicas} {end}' 2>/dev/null)
		h=$(kc -n "$NS" get hpa keda-hpa-match-fetcher-americas keda-hpa-persister \
			-o jsonpath='{range .items[*]}{.status.currentMetrics[0].external.current.averageValue},{.status.currentMetrics[1].external.current.averageValue} {end}' 2>/dev/null)
		set -- $d $h
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%H:%M:%S)" "${1:-?}" "${2:-0}" "${5:-?}" "${3:-?}" "${4:-0}" "${6:-?}" >>"$REPLICAS"
		sleep 5
	done
}
REPLICAS=$LOGS/kube-e2e-replicas.tsv
FETCHER_MIN=$(kc -n "$NS" get scaledobject match-fetcher-americas -o jsonpath='{.spec.minReplicaCount}')
PERSISTER_MIN=$(kc -n "$NS" get scaledobject persister -o jsonpath='{.spec.minReplicaCount}')
at_min() { [ "$(replicas)" = "$FETCHER_MIN $PERSISTER_MIN " ]; }

step "KEDA: a backlog of 8 x 500 matches on americas scales match-fetcher-americas to >= 3 and the persister above its minimum, and both back; a NATS pod and a fetcher pod deleted mid-backlog lose nothing"
for _ in $(seq 60); do at_min && break; sleep 5; done
at_min || fail "before the backlog: replicas (fetcher, persister) $(replicas), not the minimum $FETCHER_MIN $PERSISTER_MIN"
backlog=()
for i in 3 4 5 6 7 8 9 10; do backlog+=("$(synth $i)"); done
total=0
for p in "${backlog[@]}"; do total=$((total + $(want "$p"))); done
force=false
[ "$(stored "${backlog[0]}")" = 0 ] || force=true # a second run on the same database: refetch everything
record "$REPLICAS" &
bgpids+=($!)
v0=$(violations)
t0=$(date +%s)
reqs=()
for p in "${backlog[@]}"; do
	reqs+=("$(sync "{\"puuid\":\"$p\",\"platform\":\"na1\",\"mode\":\"full\",\"lookback_days\":730,\"count\":1000,\"priority\":\"background\",\"force\":$force}")")
done
echo "    $total matches of 8 players requested (priority background, force $force) at $(date -u +%H:%M:%S); replicas over time: $REPLICAS"
deleted=""
max_f=0
t3=""
for _ in $(seq 240); do
	sleep 5
	set -- $(replicas)
	[ "${1:-0}" -gt "$max_f" ] && max_f=$1
	[ -z "$t3" ] && [ "${1:-0}" -ge 3 ] && t3=$(($(date +%s) - t0))
	if [ -z "$deleted" ] && { [ "${1:-0}" -ge 3 ] || [ $(($(date +%s) - t0)) -ge 60 ]; }; then
		fpod=$(kc -n "$NS" get pods -l app.kubernetes.io/name=match-fetcher-americas -o jsonpath='{.items[0].metadata.name}')
		kc -n nats delete pod nats-1 --wait=false >/dev/null
		kc -n "$NS" delete pod "$fpod" --wait=false >/dev/null
		deleted="nats/nats-1 and $NS/$fpod at +$(($(date +%s) - t0))s"
		echo "    deleted pods $deleted"
	fi
	if stored_all "${backlog[@]}" && jobs_done "${reqs[@]}" && [ -n "$deleted" ]; then break; fi
done
drained=$(($(date +%s) - t0))
got=0
for p in "${backlog[@]}"; do got=$((got + $(stored "$p"))); done
ndup=0
for p in "${backlog[@]}"; do ndup=$((ndup + $(dups "$p"))); done
kc -n nats rollout status statefulset/nats --timeout=5m >/dev/null || fail "NATS did not come back to 3 ready servers"
echo "    drained after ${drained}s: $got of $total matches stored, $ndup duplicated; match-fetcher-americas max $max_f replicas${t3:+ (>= 3 at +${t3}s)}"
for _ in $(seq 120); do at_min && break; sleep 5; done
back=$(($(date +%s) - t0))
sleep 6
v1=$(violations)
max_p=$(awk -F'\t' 'NR > 1 && $5 ~ /^[0-9]+$/ && $5 > m {m = $5} END {print m + 0}' "$REPLICAS")
echo "    persister (its own consumer, FETCHED): max $max_p replicas; lag per replica over time in $REPLICAS"
echo "    SuccessfulRescale: $(kc -n "$NS" get events --field-selector reason=SuccessfulRescale -o jsonpath='{range .items[*]}{.involvedObject.name}: {.message}{"\n"}{end}' | sed -n '/match-fetcher-americas\|persister/p' | tail -6 | tr '\n' ';')"
[ "$got" = "$total" ] || fail "$got of $total backlog matches stored: lost some"
[ "$ndup" = 0 ] || fail "$ndup duplicated participant rows"
[ "$max_f" -ge 3 ] || fail "match-fetcher-americas reached only $max_f replicas under the backlog"
[ "$max_p" -gt "$PERSISTER_MIN" ] || fail "persister stayed at $max_p replicas under the backlog (minimum $PERSISTER_MIN): its own lag never scaled it"
at_min || fail "replicas (fetcher, persister) $(replicas) $back s after the backlog started, not back to $FETCHER_MIN $PERSISTER_MIN"
pass "match-fetcher-americas $FETCHER_MIN -> $max_f -> $FETCHER_MIN replicas, persister $PERSISTER_MIN -> $max_p -> $PERSISTER_MIN; $got/$total stored, none twice, after deleting $deleted; back at the minimum +${back}s"
if [ "$((v1 - v0))" = 0 ]; then
	pass "0 client-caused 429s during the backlog"
else
	fail_later "$((v1 - v0)) client-caused 429s (application or method) during the backlog: $(curl -fsS "$SIM/sim/stats" | jq -c '{rateLimited, app10s: [.buckets[] | select(.route == "americas" and .method == null and .windowSeconds == 10) | "\(.maxCount)/\(.limit)"]}')"
	why429
fi

step "the rank job and the weekly report run in the cluster and store rows (CRON_RANK_DAILY, CRON_WEEKLY_REPORT every minute)"
since=$(psql_ "SELECT now()")
kc -n "$NS" set env deploy/retry-sweeper CRON_RANK_DAILY='* * * * *' CRON_WEEKLY_REPORT='* * * * *' >/dev/null
jobs_after() { psql_ "SELECT count(*) FROM jobs WHERE type = '$1' AND status = 'completed' AND started_at > '$since'"; }
for _ in $(seq 60); do
	[ "$(jobs_after rank_daily)" -gt 0 ] && [ "$(jobs_after weekly_report)" -gt 0 ] && break
	sleep 5
done
ranks=$(psql_ "SELECT count(*) FROM league_entries WHERE snapshot_date = current_date")
reports=$(psql_ "SELECT count(*) FROM weekly_reports")
failed=$(psql_ "SELECT coalesce(string_agg(DISTINCT type || ': ' || coalesce(error, ''), '; '), '') FROM jobs WHERE type IN ('rank_daily', 'weekly_report') AND status = 'failed' AND started_at > '$since'")
kc -n "$NS" set env deploy/retry-sweeper CRON_RANK_DAILY- CRON_WEEKLY_REPORT- >/dev/null
[ "$(jobs_after rank_daily)" -gt 0 ] || fail "no completed rank_daily job in 5 min${failed:+ (failed: $failed)}"
[ "$(jobs_after weekly_report)" -gt 0 ] || fail "no completed weekly_report job in 5 min${failed:+ (failed: $failed)}"
[ "$ranks" -gt 0 ] || fail "the rank job stored no league_entries row"
[ "$reports" -gt 0 ] || fail "the weekly report stored no weekly_reports row"
pass "rank_daily: $ranks league_entries rows of today; weekly_report: $reports weekly_reports rows"

step "one ingest is one trace in Jaeger"
forward jaeger "$NS" jaeger 16686:16686
JAEGER=http://127.0.0.1:16686
req=$(sync '{"riot_id":"LugnutsK#000","platform":"na1","mode":"latest","count":20,"force":true}')
for _ in $(seq 90); do jobs_done "$req" && break; sleep 2; done
jobs_done "$req" || fail "request $req did not finish in 3 min"
tags=$(jq -rn --arg r "$req" '{"riftflow.request_id": $r} | tostring | @uri')
traces="" seen=""
for _ in $(seq 12); do
	sleep 5
	traces="" seen=""
	for svc in $(curl -fsS "$JAEGER/api/services" | jq -r '.data[]' | grep -v '^jaeger'); do
		ids=$(curl -fsS "$JAEGER/api/traces?service=$svc&tags=$tags&lookback=1h&limit=20" | jq -r '.data[].traceID')
		[ -n "$ids" ] && seen="$seen $svc" && traces="$traces $ids"
	done
	traces=$(echo "$traces" | tr ' ' '\n' | sed '/^$/d' | sort -u)
	trace_svcs=""
	[ "$(echo "$traces" | grep -c .)" = 1 ] &&
		trace_svcs=$(curl -fsS "$JAEGER/api/traces/$traces" | jq -r '[.data[0].processes[].serviceName] | unique | join(" ")')
	case " $trace_svcs " in *" resolver "*" matchid-lister "*|*" matchid-lister "*" resolver "*) ;; *) continue ;; esac
	case " $trace_svcs " in *match-fetcher*) ;; *) continue ;; esac
	case " $trace_svcs " in *" persister "*) break ;; esac
done
n=$(echo "$traces" | grep -c .)
[ "$n" = 1 ] || fail "request $req: $n traces tagged riftflow.request_id (services:$seen)"
spans=$(curl -fsS "$JAEGER/api/traces/$traces" | jq '.data[0].spans | length')
case " $trace_svcs " in *" resolver "*) ;; *) fail "trace $traces lacks the resolver: $trace_svcs" ;; esac
case " $trace_svcs " in *" matchid-lister "*) ;; *) fail "trace $traces lacks the matchid-lister: $trace_svcs" ;; esac
case " $trace_svcs " in *match-fetcher*) ;; *) fail "trace $traces lacks a match-fetcher: $trace_svcs" ;; esac
case " $trace_svcs " in *" persister "*) ;; *) fail "trace $traces lacks the persister: $trace_svcs" ;; esac
pass "request $req (LugnutsK#000): 1 trace, $traces, $spans spans from $trace_svcs"

step "no client-caused 429 in the whole run"
v=$(violations)
curl -fsS "$SIM/sim/stats" | jq -c '{total, rateLimited, violations, blacklistEvents}' | sed 's/^/    simulator: /'
if [ "$v" = 0 ]; then
	pass "0 client-caused 429s in $(curl -fsS "$SIM/sim/stats" | jq .total) Riot API calls"
else
	fail_later "$v client-caused 429s (application or method) in $(curl -fsS "$SIM/sim/stats" | jq .total) Riot API calls since the simulator started"
	why429
fi

step "the host's /dev/null is still a character device"
if [ -c /dev/null ]; then pass "/dev/null: $(stat -c '%F, owner %u' /dev/null)"; else fail_later "/dev/null is $(stat -c '%F, owner %u' /dev/null) (repair: rm /dev/null; mknod -m 666 /dev/null c 1 3)"; fi

if [ "${#failures[@]}" -gt 0 ]; then
	printf '\nkube-e2e: %d step(s) FAILED (%s):\n' "${#failures[@]}" "$(date -u +%H:%M:%S)"
	printf '    %s\n' "${failures[@]}"
	exit 1
fi
printf '\nkube-e2e: every step passed (%s)\n' "$(date -u +%H:%M:%S)"
