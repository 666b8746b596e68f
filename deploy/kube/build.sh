#!/usr/bin/env bash
# deploy/kube/build.sh: builds everything the one-node cluster of
# `make kube-up` runs, from the Go module proxy and Debian, and caches it
# under .data/kube/ (bin/ for host binaries, images/ for image tarballs).
# A second run rebuilds only what changed: each output carries a stamp of
# the version it was built from, and the Go build cache does the rest.
#
#   deploy/kube/build.sh [all|host|images|riftflow]   (default all)
#
# Host binaries (.data/kube/bin): kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, kubectl (k8s.io/kubernetes through a
# wrapper module that replaces every staging module with its v0.34.x
# release), etcd (go.etcd.io/etcd/server/v3), kube-router (only its
# NetworkPolicy firewall: iptables + ipset).
# Images (.data/kube/images/*.tar, docker-archive format, FROM scratch, for
# `ctr -n k8s.io images import`): pause, coredns, nats-server, keda operator
# and metrics API server, jaeger, and riftflow's six binaries.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=versions.env
. "$ROOT/deploy/kube/versions.env"
DATA=${KUBE_DATA:-$ROOT/.data/kube}
BIN=$DATA/bin
SRC=$DATA/src
IMG=$DATA/images
mkdir -p "$BIN" "$SRC" "$IMG"
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
GO=${GO:-go}

log() { printf '%s kube-build: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# stamp_ok NAME VALUE: the output NAME was built from VALUE already.
stamp_ok() { [ -f "$DATA/stamps/$1" ] && [ "$(cat "$DATA/stamps/$1")" = "$2" ]; }
stamp() { mkdir -p "$DATA/stamps"; printf '%s' "$2" >"$DATA/stamps/$1"; }

# wrapper DIR MODULE REQUIRE... : a module in DIR that requires REQUIRE
# (module@version words) and imports PKGS listed in tools.go, tidied.
wrapper() {
	local dir=$1 mod=$2; shift 2
	mkdir -p "$dir"
	{
		echo "module $mod"
		echo
		echo "go 1.24.0"
		echo
		echo "godebug default=go1.24"
	} >"$dir/go.mod"
}

build_kubernetes() {
	local key="$K8S_VERSION"
	if stamp_ok kubernetes "$key" && [ -x "$BIN/kubectl" ]; then log "kubernetes $K8S_VERSION cached"; return; fi
	local d=$SRC/kubernetes
	wrapper "$d" riftflow.local/kubebuild
	{
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		# Every staging module k8s.io/kubernetes replaces with ./staging/src/...
		# (absent from its module zip) comes from its own release instead.
		for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
			cloud-provider cluster-bootstrap code-generator component-base component-helpers \
			controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
			endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
			kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
			sample-apiserver sample-cli-plugin sample-controller; do
			echo "	k8s.io/$m => k8s.io/$m $K8S_STAGING_VERSION"
		done
		echo ")"
	} >>"$d/go.mod"
	cat >"$d/tools.go" <<'EOF'
//go:build tools

package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
	log "kubernetes $K8S_VERSION: go mod tidy"
	(cd "$d" && $GO mod tidy)
	local major minor
	major=$(echo "$K8S_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/')
	minor=$(echo "$K8S_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')
	local ld=""
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ld="$ld -X $p.gitTreeState=clean -X $p.gitCommit=$K8S_VERSION -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
		log "kubernetes $K8S_VERSION: build $c"
		(cd "$d" && $GO build -trimpath -ldflags "-s -w $ld" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
	done
	stamp kubernetes "$key"
}

# copy_module MODULE VERSION DIR: a writable copy of a module's source (its
# own go.mod and go.sum, replace lines included) in DIR.
copy_module() {
	local src
	src=$(cd "$SRC" && GOFLAGS= $GO mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$src" ] || { echo "kube-build: cannot download $1@$2" >&2; return 1; }
	rm -rf "$3"
	cp -r "$src" "$3"
	chmod -R u+w "$3"
}

# build_tool NAME VERSION MODULE PKG [LDFLAGS]: .data/kube/bin/NAME, built
# from PKG of MODULE@VERSION through a wrapper module (the module's own
# replace lines, which only apply to a main module, point into its
# repository and are not needed from the proxy).
build_tool() {
	local name=$1 ver=$2 mod=$3 pkg=$4 ld=${5:-}
	if stamp_ok "$name" "$ver" && [ -x "$BIN/$name" ]; then log "$name $ver cached"; return; fi
	local d=$SRC/$name
	wrapper "$d" "riftflow.local/build$(echo "$name" | tr -d -)"
	printf '\nrequire %s %s\n' "$mod" "$ver" >>"$d/go.mod"
	printf '//go:build tools\n\npackage build\n\nimport _ "%s"\n' "$pkg" >"$d/tools.go"
	log "$name $ver: go mod tidy + build"
	(cd "$d" && $GO mod tidy && $GO build -trimpath -ldflags "-s -w $ld" -o "$BIN/$name" "$pkg")
	stamp "$name" "$ver"
}

build_etcd() { build_tool etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3; }

# kube-router, run with only its NetworkPolicy firewall (iptables + ipset).
build_netpol() {
	build_tool kube-router "$KUBE_ROUTER_VERSION" github.com/cloudnativelabs/kube-router/v2 \
		github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
}

# image NAME:TAG ROOTFS_DIR ENTRYPOINT_JSON [USER]: a docker-archive tarball
# (manifest.json, config, one layer) of ROOTFS_DIR, no base image.
image() {
	local ref=$1 root=$2 ep=$3 user=${4:-65532:65532}
	local name=${ref%%:*} tag=${ref##*:} out w
	out=$IMG/$(echo "$name" | tr / _).tar
	w=$(mktemp -d)
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$root" -cf "$w/layer.tar" .
	local diff cfg
	diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{"User":"%s","Entrypoint":%s,"Env":["PATH=/"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"riftflow deploy/kube/build.sh"}]}' \
		"$user" "$ep" "$diff" >"$w/config.json"
	cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1)
	mv "$w/config.json" "$w/$cfg.json"
	printf '[{"Config":"%s.json","RepoTags":["%s:%s"],"Layers":["layer.tar"]}]' "$cfg" "$name" "$tag" >"$w/manifest.json"
	tar --owner=0 --group=0 --mtime=@0 -C "$w" -cf "$out" manifest.json "$cfg.json" layer.tar
	rm -rf "$w"
	log "image $name:$tag -> $out"
}

# rootfs DIR BINARY...: a scratch root with the CA bundle and BINARY as /app.
rootfs() {
	local d=$1; shift
	rm -rf "$d"; mkdir -p "$d/etc/ssl/certs" "$d/tmp"
	chmod 1777 "$d/tmp"
	cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/"
	for b in "$@"; do cp "$b" "$d/"; done
}

# goimage NAME:TAG MODULE@VERSION PKG BINNAME ENTRYPOINT_JSON [USER] [LDFLAGS]:
# builds PKG from a copy of MODULE and packs it as an image.
goimage() {
	local ref=$1 modver=$2 pkg=$3 bin=$4 ep=$5 user=${6:-65532:65532} ld=${7:-}
	local mod=${modver%@*} ver=${modver##*@} key
	key="$modver $pkg $ep $user $ld"
	if stamp_ok "img-$bin" "$key" && [ -f "$IMG/$(echo "${ref%%:*}" | tr / _).tar" ]; then log "image $ref cached"; return; fi
	local d=$SRC/$(echo "$mod" | tr / _)
	[ -f "$d/go.mod" ] && stamp_ok "src-$mod" "$ver" || { copy_module "$mod" "$ver" "$d"; stamp "src-$mod" "$ver"; }
	log "image $ref: build $pkg"
	mkdir -p "$DATA/out"
	(cd "$d" && $GO build -trimpath -ldflags "-s -w $ld" -o "$DATA/out/$bin" "$pkg")
	rootfs "$DATA/root-$bin" "$DATA/out/$bin"
	image "$ref" "$DATA/root-$bin" "$ep" "$user"
	stamp "img-$bin" "$key"
}

build_pause() {
	local key="pause-1"
	if stamp_ok img-pause "$key" && [ -f "$IMG/riftflow.local_pause.tar" ]; then log "image pause cached"; return; fi
	local d=$SRC/pause
	mkdir -p "$d"
	printf 'module riftflow.local/pause\n\ngo 1.24.0\n' >"$d/go.mod"
	# The sandbox's pause process: sleeps until SIGTERM/SIGINT, as
	# kubernetes/build/pause does (zombie reaping is left to the kernel
	# since each container has its own PID namespace).
	cat >"$d/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
EOF
	(cd "$d" && $GO build -trimpath -ldflags "-s -w" -o "$DATA/out/pause" .)
	rootfs "$DATA/root-pause" "$DATA/out/pause"
	image riftflow.local/pause:3.10 "$DATA/root-pause" '["/pause"]' 65535:65535
	stamp img-pause "$key"
}

build_images() {
	build_pause
	build_postgres
	goimage riftflow.local/coredns:"${COREDNS_VERSION#v}" "github.com/coredns/coredns@$COREDNS_VERSION" . coredns '["/coredns"]'
	goimage riftflow.local/nats-server:"${NATS_SERVER_VERSION#v}" "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION" . nats-server '["/nats-server"]' 1000:1000
	goimage riftflow.local/keda:"${KEDA_VERSION#v}" "github.com/kedacore/keda/v2@$KEDA_VERSION" ./cmd/operator keda '["/keda"]' 1000:1000 \
		"-X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
	goimage riftflow.local/keda-metrics-apiserver:"${KEDA_VERSION#v}" "github.com/kedacore/keda/v2@$KEDA_VERSION" ./cmd/adapter keda-adapter '["/keda-adapter"]' 1000:1000 \
		"-X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
	goimage riftflow.local/jaeger:"${JAEGER_VERSION#v}" "github.com/jaegertracing/jaeger@$JAEGER_VERSION" ./cmd/jaeger jaeger '["/jaeger"]' 10001:10001
}

# Postgres from Debian's packages (postgresql-15, installed by apt-get):
# its binaries with the shared libraries they load, its share/ directory,
# /bin/sh for the entrypoint (deploy/kube/postgres/entrypoint), and a
# passwd entry for uid 999 (initdb looks its user up).
build_postgres() {
	local pgv=15 r=$DATA/root-postgres key
	key="$(dpkg-query -W -f '${Version}' postgresql-$pgv 2>/dev/null) $(sha256sum "$ROOT/deploy/kube/postgres/entrypoint" | cut -c1-12)"
	if stamp_ok img-postgres "$key" && [ -f "$IMG/riftflow.local_postgres.tar" ]; then log "image postgres cached"; return; fi
	[ -x /usr/lib/postgresql/$pgv/bin/postgres ] || { echo "kube-build: apt-get install postgresql-$pgv" >&2; return 1; }
	if stamp_ok root-postgres "${key% *}" && [ -d "$r" ]; then
		cp "$ROOT/deploy/kube/postgres/entrypoint" "$r/entrypoint"
		image riftflow.local/postgres:$pgv "$r" '["/entrypoint"]' 999:999
		stamp img-postgres "$key"
		return
	fi
	rm -rf "$r"; mkdir -p "$r/etc" "$r/tmp" "$r/bin" "$r/usr/lib" "$r/usr/share/postgresql" "$r/var/lib/postgresql" "$r/var/run/postgresql"
	cp -a /usr/lib/postgresql "$r/usr/lib/"
	cp -a /usr/share/postgresql/$pgv "$r/usr/share/postgresql/"
	cp -a /usr/share/zoneinfo "$r/usr/share/"
	cp /bin/dash "$r/bin/sh"
	local f lib
	for f in "$r"/usr/lib/postgresql/$pgv/bin/* "$r"/usr/lib/postgresql/$pgv/lib/*.so /bin/dash; do
		for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
			[ -e "$r$lib" ] || { mkdir -p "$r$(dirname "$lib")"; cp -L "$lib" "$r$lib"; }
		done
	done
	printf 'root:x:0:0::/:/bin/sh\npostgres:x:999:999::/var/lib/postgresql:/bin/sh\n' >"$r/etc/passwd"
	printf 'root:x:0:\npostgres:x:999:\n' >"$r/etc/group"
	chmod 1777 "$r/tmp"
	cp "$ROOT/deploy/kube/postgres/entrypoint" "$r/entrypoint"
	image riftflow.local/postgres:$pgv "$r" '["/entrypoint"]' 999:999
	stamp root-postgres "${key% *}"
	stamp img-postgres "$key"
}

# riftflow's six binaries, as `make images` builds them, packed without docker.
build_riftflow() {
	local ver
	ver=${VERSION:-$(cd "$ROOT" && git describe --tags --always --dirty 2>/dev/null || echo dev)}
	mkdir -p "$DATA/out"
	for s in resolver matchid-lister match-fetcher persister retry-sweeper riftflow; do
		(cd "$ROOT" && GOWORK= GOFLAGS= $GO build -trimpath -buildvcs=false \
			-ldflags "-s -w -buildid= -X github.com/riftflow/riftflow/pkg/telemetry.Version=$ver" \
			-o "$DATA/out/riftflow-$s" "./services/$s/cmd/$s")
		rootfs "$DATA/root-riftflow-$s" "$DATA/out/riftflow-$s"
		mv "$DATA/root-riftflow-$s/riftflow-$s" "$DATA/root-riftflow-$s/app"
		image "riftflow/$s:local" "$DATA/root-riftflow-$s" '["/app"]'
	done
	# The simulator: the riftflow binary with the recorded Riot responses.
	rootfs "$DATA/root-riftflow-sim" "$DATA/out/riftflow-riftflow"
	mv "$DATA/root-riftflow-sim/riftflow-riftflow" "$DATA/root-riftflow-sim/app"
	cp -r "$ROOT/testdata/riot-fixtures" "$DATA/root-riftflow-sim/fixtures"
	image "riftflow/riftflow-sim:local" "$DATA/root-riftflow-sim" '["/app"]'
}

# helm renders the NATS and KEDA charts once (deploy/kube/render.sh); the
# rendered manifests are committed, so only that script needs it.
build_helm() {
	build_tool helm "$HELM_VERSION" helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm \
		"-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}

what=${1:-all}
start=$(date +%s)
case $what in
host) build_etcd; build_kubernetes; build_netpol ;;
images) build_images ;;
postgres) build_postgres ;;
riftflow) build_riftflow ;;
helm) build_helm ;;
all) build_etcd; build_kubernetes; build_netpol; build_images; build_riftflow ;;
*) echo "usage: $0 [all|host|images|postgres|riftflow|helm]" >&2; exit 2 ;;
esac
log "$what done in $(($(date +%s) - start))s"
