package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/riftflow/riftflow/streams"
)

// workload is one Deployment and the JetStream consumer it binds. Stream
// and consumer names come from github.com/riftflow/riftflow/streams, the
// package that declares them and that the services bind with, so a rename
// there fails these tests until the manifests follow.
type workload struct {
	name     string // Deployment, PDB and ScaledObject name
	service  string // image riftflow/<service>, OTEL_SERVICE_NAME
	stream   string
	consumer string
	// other is the workload's second consumer, its other priority queue
	// (every stage reads an interactive and a background queue): the
	// ScaledObject has a trigger on each.
	other string
	// bound are consumers the workload reads without scaling on them
	// (the retry-sweeper's rejections on EVENTS): declared, but no
	// ScaledObject trigger.
	bound []string

	region    string // FETCHER_REGIONS, fetchers only
	riotKey   bool   // calls the Riot API
	maxScaled int32  // upper bound on maxReplicaCount, 0 = unchecked
}

var workloads = func() []workload {
	ws := []workload{
		{name: "resolver", service: "resolver", stream: streams.StreamIngest, consumer: streams.ConsumerResolver,
			other: streams.ConsumerResolverBackground, riotKey: true},
		{name: "matchid-lister", service: "matchid-lister", stream: streams.StreamSync, consumer: streams.ConsumerMatchIDLister,
			other: streams.ConsumerMatchIDListerInteractive, riotKey: true},
	}
	// One fetcher Deployment per regional route, each on its own consumer.
	for _, r := range streams.DefaultRegions {
		ws = append(ws, workload{name: "match-fetcher-" + r, service: "match-fetcher", stream: streams.StreamFetch,
			consumer: streams.FetcherConsumer(r), other: streams.InteractiveFetcherConsumer(r), region: r, riotKey: true})
	}
	return append(ws,
		workload{name: "persister", service: "persister", stream: streams.StreamFetched, consumer: streams.ConsumerPersister,
			other: streams.ConsumerPersisterInteractive},
		// The sweeper's daily rank job calls league-v4 (scheduler.go).
		workload{name: "retry-sweeper", service: "retry-sweeper", stream: streams.StreamAdvisories, consumer: streams.ConsumerRetrySweeper,
			bound: []string{streams.ConsumerRetrySweeperRejections, streams.ConsumerRetrySweeperQueued}, riotKey: true, maxScaled: 2},
	)
}()

// consumers are the consumers w binds, in trigger order.
func (w workload) consumers() []string {
	if w.other == "" {
		return []string{w.consumer}
	}
	return []string{w.consumer, w.other}
}

// TestWorkloadsMatchStreamDeclarations checks the table above against the
// declarations `riftflow streams apply` creates: every consumer a
// Deployment scales on is declared, on the stream the table says, and
// every declared consumer has a Deployment.
func TestWorkloadsMatchStreamDeclarations(t *testing.T) {
	set, err := streams.Load(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	byConsumer := map[string]workload{}
	for _, w := range workloads {
		for _, name := range w.consumers() {
			byConsumer[name] = w
			c := set.Consumer(name)
			if c == nil {
				t.Errorf("%s scales on consumer %s, which streams/ does not declare", w.name, name)
				continue
			}
			if c.Stream != w.stream {
				t.Errorf("%s: consumer %s is declared on stream %s, the table says %s", w.name, name, c.Stream, w.stream)
			}
		}
		for _, name := range w.bound {
			byConsumer[name] = w
			if set.Consumer(name) == nil {
				t.Errorf("%s reads consumer %s, which streams/ does not declare", w.name, name)
			}
		}
	}
	for _, c := range set.Consumers {
		if _, ok := byConsumer[c.Config.Durable]; !ok {
			t.Errorf("declared consumer %s/%s has no Deployment", c.Stream, c.Config.Durable)
		}
	}
}

var kustomizations = []string{"base", "overlays/dev", "overlays/prod", "overlays/local"}

func TestWorkloadInvariants(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			for _, w := range workloads {
				t.Run(w.name, func(t *testing.T) { checkWorkload(t, r, w) })
			}
			checkNoStrayScaledObjects(t, r)
		})
	}
}

func checkWorkload(t *testing.T, r *rendered, w workload) {
	d, ok := r.deployments[w.name]
	if !ok {
		t.Fatalf("Deployment %s missing", w.name)
	}
	pod := &d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment %s has %d containers, want 1", w.name, len(pod.Containers))
	}
	c := &pod.Containers[0]
	if img := c.Image; img != "riftflow/"+w.service && !strings.HasPrefix(img, "riftflow/"+w.service+":") {
		t.Errorf("image = %q, want riftflow/%s", img, w.service)
	}

	checkProbe(t, c, "liveness", c.LivenessProbe, "/healthz")
	checkProbe(t, c, "readiness", c.ReadinessProbe, "/readyz")
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: want cpu and memory requests and a memory limit, got %+v", c.Resources)
	}
	checkSecurity(t, pod, c)

	// Drain budget: the kubelet must not kill the pod before the service's
	// own shutdown deadline has passed.
	raw, ok := r.env(t, c, "SHUTDOWN_TIMEOUT")
	if !ok {
		t.Fatal("SHUTDOWN_TIMEOUT not set from a ConfigMap or env")
	}
	drain, err := time.ParseDuration(raw)
	if err != nil {
		t.Fatalf("SHUTDOWN_TIMEOUT %q: %v", raw, err)
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds unset")
	}
	if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= drain {
		t.Errorf("terminationGracePeriodSeconds %v <= SHUTDOWN_TIMEOUT %v", grace, drain)
	}

	if got, _ := r.env(t, c, "OTEL_SERVICE_NAME"); got != w.service {
		t.Errorf("OTEL_SERVICE_NAME = %q, want %q", got, w.service)
	}
	if got, _ := r.env(t, c, "FETCHER_REGIONS"); got != w.region {
		t.Errorf("FETCHER_REGIONS = %q, want %q", got, w.region)
	}
	for _, name := range []string{"NATS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "RIOT_HTTP_TIMEOUT_MS", "HTTP_ADDR", "LOG_LEVEL"} {
		if v, ok := r.env(t, c, name); !ok || v == "" {
			t.Errorf("%s not set", name)
		}
	}
	if ref := secretRef(c, "DATABASE_URL"); ref == nil {
		t.Error("DATABASE_URL must come from a secretKeyRef")
	}
	if ref := secretRef(c, "RIOT_API_KEY"); (ref != nil) != w.riotKey {
		t.Errorf("RIOT_API_KEY secretKeyRef present = %v, want %v", ref != nil, w.riotKey)
	} else if ref != nil && (ref.Name != "riot-api" || ref.Key != "RIOT_API_KEY") {
		t.Errorf("RIOT_API_KEY from secret %s key %s, want riot-api/RIOT_API_KEY", ref.Name, ref.Key)
	}

	pdb, ok := r.pdbs[w.name]
	if !ok {
		t.Fatalf("PodDisruptionBudget %s missing", w.name)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("PDB selector %v: %v", pdb.Spec.Selector, err)
	}
	// The PDB must cover this workload's pods and no other's.
	for name, other := range r.deployments {
		matches := sel.Matches(labels.Set(other.Spec.Template.Labels))
		if matches != (name == w.name) {
			t.Errorf("PDB %s selector matches pods of %s = %v", w.name, name, matches)
		}
	}
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= 1 {
		t.Errorf("PDB minAvailable %v blocks drains when KEDA runs one replica; use maxUnavailable", pdb.Spec.MinAvailable)
	}

	so, ok := r.scaledObjects[w.name]
	if !ok {
		t.Fatalf("ScaledObject %s missing", w.name)
	}
	if ref := so.Spec.ScaleTargetRef; ref.Name != w.name || (ref.Kind != "" && ref.Kind != "Deployment") {
		t.Errorf("scaleTargetRef = %+v, want Deployment %s", ref, w.name)
	}
	want := w.consumers()
	if len(so.Spec.Triggers) != len(want) {
		t.Fatalf("ScaledObject %s has %d triggers, want %d (%v)", w.name, len(so.Spec.Triggers), len(want), want)
	}
	for i, tr := range so.Spec.Triggers {
		if tr.Type != "nats-jetstream" {
			t.Errorf("trigger type = %q, want nats-jetstream", tr.Type)
		}
		if tr.Metadata["stream"] != w.stream || tr.Metadata["consumer"] != want[i] {
			t.Errorf("trigger %d binds %s/%s, want %s/%s", i, tr.Metadata["stream"], tr.Metadata["consumer"], w.stream, want[i])
		}
		if ep := tr.Metadata["natsServerMonitoringEndpoint"]; !strings.HasPrefix(ep, "nats-headless.") || !strings.HasSuffix(ep, ":8222") {
			t.Errorf("natsServerMonitoringEndpoint = %q, want the headless service on 8222", ep)
		}
		if tr.Metadata["account"] == "" {
			t.Error("trigger account is empty")
		}
	}
	if fb := so.Spec.Fallback; fb == nil || fb.FailureThreshold < 1 || fb.Replicas < 1 {
		t.Errorf("ScaledObject %s: want a fallback (replicas kept while the scaler cannot read the lag), got %+v", w.name, fb)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Error("minReplicaCount must be >= 1: the services keep periodic work and readiness")
	}
	if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount < *so.Spec.MinReplicaCount {
		t.Error("maxReplicaCount unset or below minReplicaCount")
	} else if w.maxScaled > 0 && *so.Spec.MaxReplicaCount > w.maxScaled {
		t.Errorf("maxReplicaCount = %d, want <= %d", *so.Spec.MaxReplicaCount, w.maxScaled)
	}
}

// checkMemLimit: GOMEMLIMIT is the container's memory limit, through the
// downward API, so the Go GC tightens before the kernel OOM-kills the pod.
func checkMemLimit(t *testing.T, c *corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
			return
		}
	}
	t.Errorf("container %s: GOMEMLIMIT does not come from resourceFieldRef limits.memory", c.Name)
}

// TestAPIAndPolicies: the HTTP API runs as its own Deployment (riftflow
// serve) behind a Service, and a NetworkPolicy covers every riftflow pod.
func TestAPIAndPolicies(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			d, ok := r.deployments["riftflow-api"]
			if !ok {
				t.Fatal("Deployment riftflow-api missing")
			}
			c := &d.Spec.Template.Spec.Containers[0]
			if !strings.HasPrefix(c.Image, "riftflow/riftflow") || strings.Join(c.Args, " ") != "serve" {
				t.Errorf("riftflow-api runs %s %v, want riftflow/riftflow serve", c.Image, c.Args)
			}
			checkProbe(t, c, "readiness", c.ReadinessProbe, "/readyz")
			checkProbe(t, c, "liveness", c.LivenessProbe, "/healthz")
			checkSecurity(t, &d.Spec.Template.Spec, c)
			if secretRef(c, "DATABASE_URL") == nil {
				t.Error("riftflow-api: DATABASE_URL must come from a secretKeyRef")
			}
			svc, ok := r.services["riftflow-api"]
			if !ok {
				t.Fatal("Service riftflow-api missing")
			}
			if sel := labels.SelectorFromSet(svc.Spec.Selector); !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("Service riftflow-api selects %v, not the API pods", svc.Spec.Selector)
			}
			if _, ok := r.pdbs["riftflow-api"]; !ok {
				t.Error("PodDisruptionBudget riftflow-api missing")
			}
			for _, d := range r.deployments {
				if d.Labels["app.kubernetes.io/part-of"] == "riftflow" {
					checkMemLimit(t, &d.Spec.Template.Spec.Containers[0])
				}
			}
			var covered bool
			for _, np := range r.netpols {
				sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				if err == nil && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					covered = true
				}
			}
			if !covered {
				t.Error("no NetworkPolicy selects the riftflow pods")
			}
			checkIngressNotOpen(t, r)
			for name, d := range r.deployments {
				if d.Labels["app.kubernetes.io/part-of"] == "riftflow" {
					checkSpread(t, name, &d.Spec.Template)
				}
			}
		})
	}
}

func checkProbe(t *testing.T, c *corev1.Container, kind string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe: want an httpGet probe", kind)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s probe path = %q, want %q", kind, p.HTTPGet.Path, path)
	}
	port := p.HTTPGet.Port.IntValue()
	if p.HTTPGet.Port.StrVal != "" {
		port = 0
		for _, cp := range c.Ports {
			if cp.Name == p.HTTPGet.Port.StrVal {
				port = int(cp.ContainerPort)
			}
		}
	}
	if port != 8080 {
		t.Errorf("%s probe port %s resolves to %d, want 8080", kind, p.HTTPGet.Port.String(), port)
	}
}

func checkSecurity(t *testing.T, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if sc == nil {
		t.Fatal("container securityContext unset")
	}
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	if !nonRoot {
		t.Error("runAsNonRoot is not true")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && psc != nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile = %+v, want RuntimeDefault", seccomp)
	}
}

func secretRef(c *corev1.Container, name string) *corev1.SecretKeySelector {
	for _, e := range c.Env {
		if e.Name == name && e.Value == "" && e.ValueFrom != nil {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

// checkNoStrayScaledObjects: every ScaledObject targets a rendered
// Deployment, and no two scale on the same consumer.
func checkNoStrayScaledObjects(t *testing.T, r *rendered) {
	seen := map[string]string{}
	for name, so := range r.scaledObjects {
		if _, ok := r.deployments[so.Spec.ScaleTargetRef.Name]; !ok {
			t.Errorf("ScaledObject %s targets missing Deployment %q", name, so.Spec.ScaleTargetRef.Name)
		}
		for _, tr := range so.Spec.Triggers {
			key := tr.Metadata["stream"] + "/" + tr.Metadata["consumer"]
			if prev, dup := seen[key]; dup {
				t.Errorf("ScaledObjects %s and %s both scale on %s", prev, name, key)
			}
			seen[key] = name
		}
	}
}

// TestRiotKeyNeverInline: in every rendering, RIOT_API_KEY reaches a
// container only through a secretKeyRef, and no ConfigMap carries a key.
func TestRiotKeyNeverInline(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			for where, tmpl := range r.podTemplates() {
				for _, c := range containers(&tmpl.Spec) {
					for _, e := range c.Env {
						if e.Name == "RIOT_API_KEY" && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
							t.Errorf("%s container %s: RIOT_API_KEY must come from a secretKeyRef", where, c.Name)
						}
						if strings.Contains(e.Value, "RGAPI-") {
							t.Errorf("%s container %s: env %s holds a Riot key", where, c.Name, e.Name)
						}
					}
				}
			}
			for name, cm := range r.configMaps {
				for k, v := range cm.Data {
					if k == "RIOT_API_KEY" || strings.Contains(v, "RGAPI-") {
						t.Errorf("ConfigMap %s key %s holds a Riot key", name, k)
					}
				}
			}
			for name := range r.secrets {
				if name == "riot-api" || strings.HasPrefix(name, "riot-api-") {
					t.Errorf("Secret %s is rendered; the Riot key secret must be created out of band", name)
				}
			}
		})
	}
}

func TestMigrateJob(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			j := r.migrateJob(t)
			pod := &j.Spec.Template.Spec
			if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
				t.Fatalf("want one initContainer (migrate) and one container (streams apply), got %d and %d",
					len(pod.InitContainers), len(pod.Containers))
			}
			// Order matters: streams are applied only after the schema migrated.
			if got := strings.Join(pod.InitContainers[0].Args, " "); got != "migrate" {
				t.Errorf("initContainer args = %q, want migrate", got)
			}
			if got := strings.Join(pod.Containers[0].Args, " "); got != "streams apply" {
				t.Errorf("container args = %q, want streams apply", got)
			}
			for _, c := range containers(pod) {
				if !strings.HasPrefix(c.Image, "riftflow/riftflow") {
					t.Errorf("container %s image = %q, want riftflow/riftflow", c.Name, c.Image)
				}
				checkSecurity(t, pod, c)
			}
			if secretRef(&pod.InitContainers[0], "DATABASE_URL") == nil {
				t.Error("migrate has no DATABASE_URL secretKeyRef")
			}
			if v, ok := r.env(t, &pod.Containers[0], "NATS_URL"); !ok || v == "" {
				t.Error("streams apply has no NATS_URL")
			}
		})
	}
}

func TestDevOverlay(t *testing.T) {
	r := render(t, "overlays/dev")
	if _, ok := r.statefulSets["postgres"]; !ok {
		t.Error("dev: StatefulSet postgres missing")
	}
	if _, ok := r.services["postgres"]; !ok {
		t.Error("dev: Service postgres missing")
	}
	j, ok := r.deployments["jaeger"]
	if !ok {
		t.Fatal("dev: Deployment jaeger missing")
	}
	if img := j.Spec.Template.Spec.Containers[0].Image; !strings.Contains(img, "jaegertracing/jaeger:2.") {
		t.Errorf("dev: jaeger image %q, want Jaeger v2", img)
	}
	if got := r.configMapValue(t, "riftflow-config", "OTEL_EXPORTER_OTLP_ENDPOINT"); got != "http://jaeger:4318" {
		t.Errorf("dev: OTEL_EXPORTER_OTLP_ENDPOINT = %q, want the dev Jaeger", got)
	}
	// The services reference riftflow-pg-app; in dev the generator provides it.
	d := r.deployments["persister"]
	ref := secretRef(&d.Spec.Template.Spec.Containers[0], "DATABASE_URL")
	if s, ok := r.secrets[ref.Name]; !ok {
		t.Errorf("dev: DATABASE_URL secret %q is not rendered", ref.Name)
	} else if _, ok := s.Data[ref.Key]; !ok {
		t.Errorf("dev: secret %s has no key %s", ref.Name, ref.Key)
	}
}

func TestProdOverlay(t *testing.T) {
	r := render(t, "overlays/prod")
	c, ok := r.clusters["riftflow-pg"]
	if !ok {
		t.Fatal("prod: CloudNativePG Cluster riftflow-pg missing")
	}
	if c.Spec.Instances < 3 {
		t.Errorf("prod: Cluster instances = %d, want >= 3", c.Spec.Instances)
	}
	for _, s := range r.statefulSets {
		t.Errorf("prod: unexpected StatefulSet %s (Postgres is CloudNativePG)", s.Name)
	}
	if url := r.configMapValue(t, "riftflow-config", "NATS_URL"); !strings.HasPrefix(url, "tls://") {
		t.Errorf("prod: NATS_URL = %q, want tls://", url)
	}

	// Every container that talks to NATS connects as the user the
	// generated deploy/nats/auth.conf declares for it (streams.Grants),
	// with that user's password from the Secret nats-users under the key
	// the server reads it from (streams.PasswordEnv), and sees NATS_TLS_CA
	// on a volume mounted from a Secret.
	declared := map[string]bool{}
	for _, g := range streams.Grants {
		declared[g.User] = true
	}
	check := func(where string, pod *corev1.PodSpec, c *corev1.Container, user string) {
		if !declared[user] {
			t.Fatalf("%s: user %q is not in streams.Grants", where, user)
		}
		if got, ok := r.env(t, c, "NATS_USER"); !ok || got != user {
			t.Errorf("%s: NATS_USER = %q, want %q (deploy/nats/auth.conf)", where, got, user)
		}
		if ref := secretRef(c, "NATS_PASSWORD"); ref == nil || ref.Name != "nats-users" || ref.Key != streams.PasswordEnv(user) {
			t.Errorf("%s: NATS_PASSWORD from %+v, want Secret nats-users key %s", where, ref, streams.PasswordEnv(user))
		}
		for _, name := range []string{"NATS_NKEY_SEED_FILE", "NATS_CREDS_FILE", "NATS_TOKEN"} {
			if v, ok := r.env(t, c, name); ok || v != "" {
				t.Errorf("%s: %s is set, but auth.conf declares password users", where, name)
			}
		}
		path, ok := r.env(t, c, "NATS_TLS_CA")
		if !ok || path == "" {
			t.Errorf("%s: NATS_TLS_CA unset", where)
		} else if !mountedFromSecret(pod, c, path) {
			t.Errorf("%s: NATS_TLS_CA=%s is not on a volume mounted from a Secret", where, path)
		}
	}
	for _, w := range workloads {
		d := r.deployments[w.name]
		check("Deployment/"+w.name, &d.Spec.Template.Spec, &d.Spec.Template.Spec.Containers[0], streams.ServiceUser(w.service))
	}
	j := r.migrateJob(t)
	// Only the admin may create streams, consumers and buckets.
	check("Job/riftflow-migrate streams apply", &j.Spec.Template.Spec, &j.Spec.Template.Spec.Containers[0], streams.UserAdmin)
	d := r.deployments["riftflow-api"]
	check("Deployment/riftflow-api", &d.Spec.Template.Spec, &d.Spec.Template.Spec.Containers[0], streams.UserCLI)
	if got := r.configMapValue(t, "riftflow-config", "STREAM_REPLICAS"); got != "3" {
		t.Errorf("prod: STREAM_REPLICAS = %q, want 3 (streams and KV buckets on every NATS node)", got)
	}
	if c.Spec.Backup == nil || c.Spec.Backup.BarmanObjectStore == nil || c.Spec.Backup.RetentionPolicy == "" {
		t.Error("prod: the Cluster archives no WAL and keeps no backups")
	}
	var scheduled bool
	for _, b := range r.backups {
		scheduled = scheduled || b.Spec.Cluster.Name == "riftflow-pg"
	}
	if !scheduled {
		t.Error("prod: no ScheduledBackup for riftflow-pg")
	}
	if len(r.podMonitors) == 0 || len(r.rules) == 0 {
		t.Error("prod: no PodMonitor or PrometheusRule (components/monitoring)")
	}
	checkPoolBudget(t, r, c)

	// Every failure an operator cannot see otherwise has an alert: a metric
	// each must read.
	var exprs []string
	for _, rule := range r.rules {
		for _, g := range rule.Spec.Groups {
			for _, rl := range g.Rules {
				exprs = append(exprs, rl.Alert+": "+rl.Expr.String())
			}
		}
	}
	for what, metric := range map[string]string{
		"a paused consumer":          "riftflow_consumer_paused_seconds_total",
		"a failing scheduled job":    "riftflow_scheduled_job_runs_total",
		"a failed migrate Job":       "kube_job_status_failed",
		"KEDA scaler errors":         "keda_scaled_object_errors_total",
		"JetStream meta quorum loss": "jetstream_server_total_streams",
		"a stream without a leader":  "jetstream_stream_total_messages",
	} {
		found := false
		for _, e := range exprs {
			found = found || strings.Contains(e, metric)
		}
		if !found {
			t.Errorf("prod: no alert on %s (reading %s)", what, metric)
		}
	}
	// kube-prometheus-stack's default selectors pick objects labelled with
	// its release name (docs/operations.md); unlabelled ones are ignored.
	for name, pm := range r.podMonitors {
		if pm.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("prod: PodMonitor %s labels %v lack release: kube-prometheus-stack", name, pm.Labels)
		}
	}
	for name, rule := range r.rules {
		if rule.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("prod: PrometheusRule %s labels %v lack release: kube-prometheus-stack", name, rule.Labels)
		}
	}

	// auth.conf's users are in the global account: KEDA reads the lag of
	// their consumers there.
	for name, so := range r.scaledObjects {
		for i, tr := range so.Spec.Triggers {
			if acc := tr.Metadata["account"]; acc != "$G" {
				t.Errorf("prod: ScaledObject %s trigger %d queries account %q, but auth.conf's users are in \"$G\"", name, i, acc)
			}
		}
	}
}

// migrateJob is the one migrate Job of r. The overlays name it after the
// riftflow/riftflow image tag, so that each release applies a new Job (a
// Job's pod template is immutable).
func (r *rendered) migrateJob(t *testing.T) *batchv1.Job {
	t.Helper()
	var found []string
	for name := range r.jobs {
		if strings.HasPrefix(name, "riftflow-migrate") {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one riftflow-migrate Job, got %v", found)
	}
	j := r.jobs[found[0]]
	img := j.Spec.Template.Spec.Containers[0].Image
	if _, tag, ok := strings.Cut(img, ":"); ok {
		if want := "riftflow-migrate-" + strings.ReplaceAll(tag, ".", "-"); found[0] != want {
			t.Errorf("Job %s runs %s: name it %s so the next release applies a new Job", found[0], img, want)
		}
	}
	return j
}

func (r *rendered) configMapValue(t *testing.T, name, key string) string {
	t.Helper()
	cm, ok := r.configMaps[name]
	if !ok {
		t.Fatalf("ConfigMap %s missing", name)
	}
	return cm.Data[key]
}

func mountedFromSecret(pod *corev1.PodSpec, c *corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName != "" {
				return true
			}
		}
	}
	return false
}

// TestNATSHelmValues checks the values for the official nats chart: a
// 3-node JetStream cluster on file-store PVCs with monitoring on 8222.
func TestNATSHelmValues(t *testing.T) {
	var v struct {
		Config struct {
			Cluster struct {
				Enabled  bool `json:"enabled"`
				Replicas int  `json:"replicas"`
			} `json:"cluster"`
			JetStream struct {
				Enabled   bool `json:"enabled"`
				FileStore struct {
					Enabled bool `json:"enabled"`
					PVC     struct {
						Enabled bool   `json:"enabled"`
						Size    string `json:"size"`
					} `json:"pvc"`
				} `json:"fileStore"`
			} `json:"jetstream"`
			Monitor struct {
				Enabled bool `json:"enabled"`
				Port    int  `json:"port"`
			} `json:"monitor"`
		} `json:"config"`
	}
	raw, err := os.ReadFile(filepath.Join("nats", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	c := v.Config
	if !c.Cluster.Enabled || c.Cluster.Replicas != 3 {
		t.Errorf("cluster = %+v, want enabled with 3 replicas", c.Cluster)
	}
	if !c.JetStream.Enabled || !c.JetStream.FileStore.Enabled || !c.JetStream.FileStore.PVC.Enabled || c.JetStream.FileStore.PVC.Size == "" {
		t.Errorf("jetstream = %+v, want a file store on PVCs", c.JetStream)
	}
	if !c.Monitor.Enabled || c.Monitor.Port != 8222 {
		t.Errorf("monitor = %+v, want enabled on 8222 (KEDA reads /jsz there)", c.Monitor)
	}
	type exporter struct {
		PromExporter struct {
			Enabled    bool `json:"enabled"`
			PodMonitor struct {
				Enabled bool `json:"enabled"`
			} `json:"podMonitor"`
		} `json:"promExporter"`
	}
	var exp, expProd exporter
	rawProd, err := os.ReadFile(filepath.Join("nats", "values-prod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(rawProd, &expProd); err != nil {
		t.Fatal(err)
	}
	if !exp.PromExporter.Enabled || !expProd.PromExporter.PodMonitor.Enabled {
		t.Errorf("promExporter = %+v / prod %+v, want the NATS exporter on, and its PodMonitor in prod", exp.PromExporter, expProd.PromExporter)
	}
	checkNATSServerPinned(t, raw, rawProd)
	for _, f := range []string{"values-dev.yaml", "values-prod.yaml"} {
		raw, err := os.ReadFile(filepath.Join("nats", f))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Config struct {
				Resolver struct {
					Enabled bool `json:"enabled"`
				} `json:"resolver"`
				Merge map[string]any `json:"merge"`
			} `json:"config"`
			Container struct {
				Merge struct {
					EnvFrom []corev1.EnvFromSource `json:"envFrom"`
				} `json:"merge"`
			} `json:"container"`
		}
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		// An account resolver needs an operator JWT: without one in the
		// same values the server exits with "no operator key found".
		if m.Config.Resolver.Enabled && m.Config.Merge["operator"] == nil {
			t.Errorf("%s: config.resolver is enabled without config.merge.operator: the server will not start", f)
		}
		if f == "values-prod.yaml" && m.Config.Merge["00$include"] != "auth.conf" {
			t.Errorf("%s: config.merge lacks the include of auth.conf (the riftflow users)", f)
		}
		// auth.conf's passwords are $NATS_PASSWORD_<USER>: the server's
		// environment must hold them, from the Secret nats-users.
		if f == "values-prod.yaml" {
			var fromSecret bool
			for _, e := range m.Container.Merge.EnvFrom {
				fromSecret = fromSecret || e.SecretRef != nil && e.SecretRef.Name == "nats-users"
			}
			if !fromSecret {
				t.Errorf("%s: the server's environment lacks the Secret nats-users (auth.conf's $NATS_PASSWORD_<USER>)", f)
			}
		}
	}
}

// checkNATSServerPinned: the chart runs the nats-server release the tests
// embed (github.com/nats-io/nats-server/v2 in this module's go.mod), not the
// chart's default image; WebSocket is on for browsers following progress,
// and in prod a WebSocket client without credentials is the user "web".
func checkNATSServerPinned(t *testing.T, raw, rawProd []byte) {
	t.Helper()
	var v struct {
		Config struct {
			WebSocket struct {
				Enabled bool `json:"enabled"`
				Port    int  `json:"port"`
				Merge   struct {
					NoAuthUser string `json:"no_auth_user"`
				} `json:"merge"`
			} `json:"websocket"`
		} `json:"config"`
		Container struct {
			Image struct {
				Tag string `json:"tag"`
			} `json:"image"`
		} `json:"container"`
	}
	var prod = v
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(rawProd, &prod); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no github.com/nats-io/nats-server/v2")
	}
	if want := string(m[1]) + "-alpine"; v.Container.Image.Tag != want {
		t.Errorf("container.image.tag = %q, want %q (the nats-server of go.mod)", v.Container.Image.Tag, want)
	}
	if !v.Config.WebSocket.Enabled || v.Config.WebSocket.Port == 0 {
		t.Errorf("config.websocket = %+v, want enabled (progress for browsers)", v.Config.WebSocket)
	}
	if got := prod.Config.WebSocket.Merge.NoAuthUser; got != streams.UserWeb {
		t.Errorf("prod: config.websocket.merge.no_auth_user = %q, want %q", got, streams.UserWeb)
	}
}

// dbWorkloads are the Deployments whose process opens a Postgres pool
// (store.ConnectFor in their stage's Connect, and `riftflow serve`); the
// fetchers and the resolver never connect.
var dbWorkloads = []string{"matchid-lister", "persister", "retry-sweeper", "riftflow-api"}

// checkPoolBudget: at every workload's largest replica count (KEDA's
// maxReplicaCount, or replicas without a ScaledObject), their pools of
// DATABASE_POOL_MAX_CONNS plus the migrate Job and two operator CLIs fit in
// the Cluster's max_connections, less superuser_reserved_connections (3)
// and CloudNativePG's own connections (a few; 10 are kept).
func checkPoolBudget(t *testing.T, r *rendered, c *cnpgCluster) {
	t.Helper()
	maxConns, err := strconv.Atoi(c.Spec.PostgreSQL.Parameters["max_connections"])
	if err != nil {
		t.Fatalf("prod: max_connections %q: %v", c.Spec.PostgreSQL.Parameters["max_connections"], err)
	}
	total := 3 // the migrate Job and two CLIs, one connection each
	for _, name := range dbWorkloads {
		d, ok := r.deployments[name]
		if !ok {
			t.Fatalf("prod: Deployment %s missing", name)
		}
		raw, ok := r.env(t, &d.Spec.Template.Spec.Containers[0], "DATABASE_POOL_MAX_CONNS")
		pool, err := strconv.Atoi(raw)
		if !ok || err != nil || pool < 1 {
			t.Errorf("prod: %s DATABASE_POOL_MAX_CONNS = %q: want a pool size (pgx's default grows with the node's CPUs)", name, raw)
			continue
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		if so, ok := r.scaledObjects[name]; ok && so.Spec.MaxReplicaCount != nil {
			replicas = int(*so.Spec.MaxReplicaCount)
		}
		total += replicas * pool
	}
	if budget := maxConns - 3 - 10; total > budget {
		t.Errorf("prod: pools at maximum scale open %d connections, more than max_connections %d leaves (%d)", total, maxConns, budget)
	}
}

// checkIngressNotOpen: no ingress rule of a riftflow NetworkPolicy admits
// every pod of every namespace (a rule without from, or a peer that is an
// empty namespaceSelector without a podSelector): port 8080 carries the API
// and /metrics.
func checkIngressNotOpen(t *testing.T, r *rendered) {
	t.Helper()
	empty := func(s *metav1.LabelSelector) bool {
		return s == nil || len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
	}
	for name, np := range r.netpols {
		for i, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				t.Errorf("NetworkPolicy %s ingress rule %d admits every namespace", name, i)
			}
			for _, p := range rule.From {
				if p.NamespaceSelector != nil && empty(p.NamespaceSelector) && empty(p.PodSelector) {
					t.Errorf("NetworkPolicy %s ingress rule %d admits every pod of every namespace", name, i)
				}
			}
		}
	}
}

// checkSpread: a workload's replicas spread over nodes by a constraint that
// counts its own pods only (its app.kubernetes.io/name).
func checkSpread(t *testing.T, name string, tpl *corev1.PodTemplateSpec) {
	t.Helper()
	for _, c := range tpl.Spec.TopologySpreadConstraints {
		if c.TopologyKey != "kubernetes.io/hostname" || c.LabelSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || !sel.Matches(labels.Set(tpl.Labels)) {
			continue
		}
		if c.LabelSelector.MatchLabels["app.kubernetes.io/name"] == tpl.Labels["app.kubernetes.io/name"] ||
			slices.Contains(c.MatchLabelKeys, "app.kubernetes.io/name") {
			return
		}
	}
	t.Errorf("Deployment %s: no topology spread over kubernetes.io/hostname counting its own pods", name)
}

// TestLocalOverlay: overlays/local is prod with only the laptop's
// differences: no CloudNativePG (a Postgres StatefulSet and a generated
// riftflow-pg-app in its place), the simulator as the Riot API, the local
// images (never pulled), the namespace still restricted.
func TestLocalOverlay(t *testing.T) {
	r := render(t, "overlays/local")
	if len(r.clusters) != 0 || len(r.backups) != 0 {
		t.Errorf("local: CloudNativePG objects rendered (%d Cluster, %d ScheduledBackup); the operator is not built", len(r.clusters), len(r.backups))
	}
	if _, ok := r.statefulSets["postgres"]; !ok {
		t.Error("local: StatefulSet postgres missing")
	}
	d := r.deployments["persister"]
	ref := secretRef(&d.Spec.Template.Spec.Containers[0], "DATABASE_URL")
	if s, ok := r.secrets[ref.Name]; !ok || !strings.Contains(string(s.Data["uri"])+s.StringData["uri"], "@postgres:5432/") {
		t.Errorf("local: DATABASE_URL secret %q does not point at the postgres StatefulSet", ref.Name)
	}
	if got := r.configMapValue(t, "riftflow-config", "RIOT_API_BASE_URL"); got != "http://riot-sim:8099/{route}" {
		t.Errorf("local: RIOT_API_BASE_URL = %q, want the simulator", got)
	}
	if got := r.configMapValue(t, "riftflow-config", "STREAM_REPLICAS"); got != "3" {
		t.Errorf("local: STREAM_REPLICAS = %q, want prod's 3", got)
	}
	if _, ok := r.deployments["riot-sim"]; !ok {
		t.Error("local: Deployment riot-sim missing")
	}
	for name, d := range r.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			local := strings.HasSuffix(c.Image, ":local") || strings.HasPrefix(c.Image, "riftflow.local/")
			if !local || c.ImagePullPolicy == corev1.PullAlways {
				t.Errorf("local: Deployment %s runs %s (pull %s), want an image built by deploy/kube and never pulled", name, c.Image, c.ImagePullPolicy)
			}
		}
	}
	if ns, ok := r.namespaces["riftflow"]; !ok || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("local: namespace riftflow missing or not enforcing restricted Pod Security")
	}
	// make kube-e2e waits for a scale-up and a scale-down within minutes, on
	// a node of 2 cores that must hold every workload at its maximum.
	var milliCPU int64
	for name, d := range r.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			req := c.Resources.Requests[corev1.ResourceCPU]
			n := int64(1)
			if d.Spec.Replicas != nil {
				n = int64(*d.Spec.Replicas)
			}
			if so, ok := r.scaledObjects[name]; ok && so.Spec.MaxReplicaCount != nil {
				n = int64(*so.Spec.MaxReplicaCount)
			}
			milliCPU += req.MilliValue() * n
		}
	}
	if milliCPU > 1000 {
		t.Errorf("local: CPU requests at every ScaledObject's maximum = %dm, want <= 1 of the node's 2 cores (NATS, KEDA and CoreDNS need the rest)", milliCPU)
	}
	for name, so := range r.scaledObjects {
		s := so.Spec
		if s.PollingInterval == nil || *s.PollingInterval > 5 || s.CooldownPeriod == nil || *s.CooldownPeriod > 60 {
			t.Errorf("local: ScaledObject %s polls every %v s, cools down %v s; want <= 5 and <= 60", name, s.PollingInterval, s.CooldownPeriod)
		}
		if s.Advanced == nil || s.Advanced.HorizontalPodAutoscalerConfig == nil || s.Advanced.HorizontalPodAutoscalerConfig.Behavior == nil ||
			s.Advanced.HorizontalPodAutoscalerConfig.Behavior.ScaleDown == nil ||
			s.Advanced.HorizontalPodAutoscalerConfig.Behavior.ScaleDown.StabilizationWindowSeconds == nil ||
			*s.Advanced.HorizontalPodAutoscalerConfig.Behavior.ScaleDown.StabilizationWindowSeconds > 60 {
			t.Errorf("local: ScaledObject %s: want a scale-down stabilization window <= 60 s (the HPA default is 300 s)", name)
		}
	}
	// The persister scales on its own background lag from 50 a replica, so
	// that the 4,000-match backlog of make kube-e2e shows it; prod keeps 500.
	for _, env := range []struct {
		r    *rendered
		want string
	}{{r, "50"}, {render(t, "overlays/prod"), "500"}} {
		so, ok := env.r.scaledObjects["persister"]
		if !ok || len(so.Spec.Triggers) == 0 || so.Spec.Triggers[0].Metadata["consumer"] != "persister" ||
			so.Spec.Triggers[0].Metadata["lagThreshold"] != env.want {
			t.Errorf("persister ScaledObject: first trigger %+v, want consumer persister with lagThreshold %s", so.Spec.Triggers, env.want)
		}
	}
}
