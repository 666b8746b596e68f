#!/usr/bin/env bash
# deploy/kube/render.sh: renders the official NATS chart once, at the
# version pinned in deploy/nats/values.yaml (NATS_CHART_VERSION), into
# deploy/nats/rendered/: prod.yaml (values.yaml + values-prod.yaml, the
# users of auth.conf) and local.yaml (+ values-local.yaml, for
# deploy/overlays/local). The rendered files are committed, so neither
# `make kube-up` nor the tests need helm or the chart repository; run this
# after changing a values file. The chart comes from its repository, or
# from NATS_CHART_DIR (a checkout of github.com/nats-io/k8s
# helm/charts/nats at tag nats-$NATS_CHART_VERSION).
set -euo pipefail
. "$(dirname "$0")/env.sh"
[ -x "$BIN/helm" ] || "$ROOT/deploy/kube/build.sh" helm
if [ -n "${NATS_CHART_DIR:-}" ]; then
	chart=("$NATS_CHART_DIR")
	v=$(sed -n 's/^version: //p' "$NATS_CHART_DIR/Chart.yaml")
	[ "$v" = "$NATS_CHART_VERSION" ] || { echo "render: $NATS_CHART_DIR is chart $v, want $NATS_CHART_VERSION" >&2; exit 1; }
else
	chart=(nats --repo https://nats-io.github.io/k8s/helm/charts/ --version "$NATS_CHART_VERSION")
fi
out=$ROOT/deploy/nats/rendered
mkdir -p "$out"
render() {
	local name=$1; shift
	{
		echo "# Rendered by deploy/kube/render.sh: NATS Helm chart $NATS_CHART_VERSION, release nats,"
		echo "# namespace nats, values: $*. Do not edit; change the values and re-render."
		"$BIN/helm" template nats "${chart[@]}" --namespace nats \
			$(for f in "$@"; do printf -- '-f %s ' "$ROOT/deploy/nats/$f"; done) \
			--set-file 'configMap.merge.data.auth\.conf='"$ROOT/deploy/nats/auth.conf"
	} >"$out/$name.yaml"
	echo "render: deploy/nats/rendered/$name.yaml"
}
render prod values.yaml values-prod.yaml
render local values.yaml values-prod.yaml values-local.yaml
