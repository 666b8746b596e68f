package deploy_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/streams"
)

// TestMain gives the process test a Postgres (DATABASE_URL, or a throwaway
// cluster); under CI=true a missing one fails instead of skipping.
func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRenderedWorkloadsRun runs each overlay as an operator would: every
// Deployment's and Job's container becomes a local process of the binary
// its image names, started with exactly the rendered arguments and
// environment (env, envFrom ConfigMaps, GOMEMLIMIT from the memory limit,
// files of mounted Secrets). Only what points into the cluster is mapped:
//
//   - NATS_URL: a local 3-node JetStream cluster; the prod one serves TLS
//     and includes the generated deploy/nats/auth.conf (streams.Grants),
//     with a password per user in its environment as the chart's server
//     has it (NATS_PASSWORD_<USER>), so every permission is enforced,
//   - secretKeyRef NATS_PASSWORD (Secret nats-users): that user's password,
//   - secretKeyRef DATABASE_URL: a fresh Postgres database,
//   - secretKeyRef RIOT_API_KEY and RIOT_API_BASE_URL: `riftflow sim`,
//   - OTEL_EXPORTER_OTLP_ENDPOINT: a local endpoint that accepts spans,
//   - HTTP_ADDR: a free local port per process (the probes' port),
//   - the paths of mounted Secret volumes: a directory per volume.
//
// In prod the local cluster serves TLS with a certificate of a CA made for
// the run, and the nats-ca Secret mount holds that CA (NATS_TLS_CA). Then it
// checks that the Job succeeds, every workload becomes ready and stays up,
// the HTTP API answers (with a token), the streams and KV buckets have the
// rendered STREAM_REPLICAS (3 in prod), an ingest through the API
// completes with every match and timeline the simulator serves for the
// player stored, the admin routes work as the API's NATS user, no workload
// hit a permission violation, and every riftflow_/riot_ metric the
// PrometheusRule uses is exported.
func TestRenderedWorkloadsRun(t *testing.T) {
	testenv.SkipShort(t, "starts every workload of the overlays as processes")
	bins := buildBinaries(t)
	for _, dir := range []string{"overlays/prod", "overlays/dev"} {
		t.Run(dir, func(t *testing.T) { runOverlay(t, dir, bins) })
	}
}

// buildBinaries builds riftflow and the five services into a temporary
// directory, keyed by image name (riftflow/<name>).
func buildBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var pkgs []string
	for _, name := range []string{"riftflow", "resolver", "matchid-lister", "match-fetcher", "persister", "retry-sweeper"} {
		out["riftflow/"+name] = filepath.Join(dir, name)
		pkgs = append(pkgs, "./services/"+name+"/cmd/"+name)
	}
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// natsUsers is the prod cluster's auth: user -> password, one per user of
// streams.Grants (deploy/nats/auth.conf).
type natsUsers map[string]string

// byKey is the password under key of the Secret nats-users
// (streams.PasswordEnv of its user).
func (u natsUsers) byKey(key string) (string, bool) {
	for user, pw := range u {
		if streams.PasswordEnv(user) == key {
			return pw, true
		}
	}
	return "", false
}

func runOverlay(t *testing.T, dir string, bins map[string]string) {
	r := render(t, dir)
	prod := strings.HasSuffix(dir, "prod")

	// The prod cluster runs with the generated auth.conf: a password for
	// each of its users. The workloads get theirs from the Secret
	// nats-users as rendered (TestProdOverlay checks which user each has).
	users := natsUsers{}
	if prod {
		for _, g := range streams.Grants {
			users[g.User] = randHex(t, 16)
		}
	}
	// The prod overlay reaches NATS over TLS (tls:// and NATS_TLS_CA):
	// the local cluster then serves TLS with a CA made for this run, whose
	// certificate is the file the nats-ca Secret mount holds.
	var tlsDir string
	if strings.HasPrefix(r.configMaps["riftflow-config"].Data["NATS_URL"], "tls://") {
		tlsDir = makeTLS(t)
	}
	natsURL := startNATSCluster(t, users, tlsDir)
	// An empty database: the rendered migrate Job must create the schema.
	dbURL := pgtest.NewEmptyDatabase(t)
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(otlp.Close)
	simKey := "RGAPI-deploytest-" + randHex(t, 6)
	simBase, simURL := startSim(t, bins["riftflow/riftflow"], simKey, syntheticMatches)

	m := mapping{natsURL: natsURL, tlsDir: tlsDir, dbURL: dbURL, riotKey: simKey, riotBase: simBase, otlp: otlp.URL,
		users: users, filesDir: t.TempDir()}

	// The Job: initContainers in order, then the containers; each must exit 0.
	j := r.migrateJob(t)
	for _, c := range append(append([]corev1.Container{}, j.Spec.Template.Spec.InitContainers...), j.Spec.Template.Spec.Containers...) {
		p := m.command(t, r, bins, &j.Spec.Template.Spec, &c, "Job/"+j.Name+"/"+c.Name)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		p.cmd = exec.CommandContext(ctx, p.cmd.Path, p.cmd.Args[1:]...)
		p.cmd.Env = p.env
		out, err := p.cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", p.name, err, out)
		}
	}

	// The streams and KV buckets carry the rendered replica count.
	want := 1
	if v, ok := r.configMaps["riftflow-config"].Data["STREAM_REPLICAS"]; ok {
		want, _ = strconv.Atoi(v)
	}
	if prod && want != 3 {
		t.Errorf("prod: STREAM_REPLICAS = %d, want 3", want)
	}
	checkReplicas(t, natsURL, users, tlsDir, want)

	// Every Deployment as a process.
	var procs []*process
	for _, w := range r.workloadContainers() {
		if w.kind != "Deployment" {
			continue
		}
		p := m.command(t, r, bins, w.pod, w.c, "Deployment/"+w.name)
		p.start(t)
		procs = append(procs, p)
	}
	if len(procs) != 9 {
		t.Errorf("%d Deployments started, want 9 (5 services, 4 fetcher regions, the API)", len(procs))
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, p := range procs {
		p.waitReady(t, deadline)
	}
	if t.Failed() {
		return
	}

	// An ingest through the HTTP API, with its SSE progress.
	var api *process
	for _, p := range procs {
		if p.name == "Deployment/riftflow-api" {
			api = p
		}
	}
	player := demoPlayer(t, simURL)
	// The API needs a bearer token with scope sync; the operator makes one
	// with the same binary (`riftflow token create`, docs/security.md).
	token := createToken(t, bins["riftflow/riftflow"], dbURL, "sync")
	body := fmt.Sprintf(`{"puuid":%q,"platform":%q,"mode":"full","lookback_days":730,"count":100}`, player.PUUID, player.Platform)
	var accepted struct {
		RequestID string `json:"request_id"`
		Events    string `json:"events"`
	}
	if code := apiCall(t, api.base, http.MethodPost, "/v1/sync", token, body, &accepted); code != http.StatusAccepted || accepted.RequestID == "" {
		t.Fatalf("POST /v1/sync = %d %+v, want 202 with a request_id", code, accepted)
	}
	// The SSE progress stream, followed to its end.
	if last := lastSSEEvent(t, api.base+"/v1/sync/"+accepted.RequestID+"/events", token, 3*time.Minute); last.Status != "completed" ||
		last.Total != player.Stored || last.Progress != last.Total {
		t.Errorf("the sync ended %+v, want completed with %d of %d", last, player.Stored, player.Stored)
	}
	stored, timelines := waitMatchesStored(t, dbURL, player, 30*time.Second)
	t.Logf("%s: %d of %d matches and %d of %d timelines of %s stored", dir, stored, player.Stored, timelines, player.Timelines, player.PUUID[:8])
	// The read API answers with what was stored.
	var page struct {
		Matches []json.RawMessage `json:"matches"`
	}
	if code := apiCall(t, api.base, http.MethodGet, "/v1/players/"+player.PUUID+"/matches?limit=100", token, "", &page); code != http.StatusOK || len(page.Matches) != player.Stored {
		t.Errorf("GET /v1/players/…/matches = %d with %d matches, want 200 with %d", code, len(page.Matches), player.Stored)
	}
	if code := apiCall(t, api.base, http.MethodGet, "/v1/players/"+player.PUUID, "", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/players/… without a token = %d, want 401", code)
	}
	checkAdminRoutes(t, api.base, createToken(t, bins["riftflow/riftflow"], dbURL, "admin"), player.PUUID, prod)

	// The workloads are still up, were never refused by NATS, and export
	// what the alerts read.
	for _, p := range procs {
		if p.exited() {
			t.Errorf("%s exited:\n%s", p.name, p.tail())
		}
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, "Permissions Violation") || strings.Contains(l, "Authorization Violation") {
				t.Errorf("%s was refused by NATS: %s", p.name, l)
			}
		}
	}
	checkAlertMetrics(t, r, procs)
}

// createToken makes an API token with scopes in the database at dbURL
// with the CLI binary, as an operator does, and returns it.
func createToken(t *testing.T, cli, dbURL, scopes string) string {
	t.Helper()
	cmd := exec.Command(cli, "token", "create", "--name", "deploy-test-"+scopes, "--scopes", scopes)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("riftflow token create: %v\n%s", err, out)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	tok := lines[len(lines)-1]
	if !strings.HasPrefix(tok, "rft_") {
		t.Fatalf("riftflow token create printed no token:\n%s", out)
	}
	return tok
}

// mapping says how cluster addresses and secrets become local ones.
type mapping struct {
	natsURL, dbURL, riotKey, riotBase, otlp string
	tlsDir                                  string // "": no TLS
	users                                   natsUsers
	filesDir                                string
}

type workloadContainer struct {
	kind, name string
	pod        *corev1.PodSpec
	c          *corev1.Container
}

// workloadContainers lists every Deployment's and Job's containers, sorted.
func (r *rendered) workloadContainers() []workloadContainer {
	var out []workloadContainer
	for n, d := range r.deployments {
		if d.Labels["app.kubernetes.io/part-of"] != "riftflow" {
			continue // dev's Jaeger: infrastructure, mapped
		}
		for i := range d.Spec.Template.Spec.Containers {
			out = append(out, workloadContainer{"Deployment", n, &d.Spec.Template.Spec, &d.Spec.Template.Spec.Containers[i]})
		}
	}
	for n, j := range r.jobs {
		for _, c := range containers(&j.Spec.Template.Spec) {
			out = append(out, workloadContainer{"Job", n, &j.Spec.Template.Spec, c})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].kind+out[i].name+out[i].c.Name < out[j].kind+out[j].name+out[j].c.Name
	})
	return out
}

// resolvedEnv is the container's environment as Kubernetes builds it:
// envFrom ConfigMaps in order, then env (which wins). Values from Secrets
// and the downward API are returned as "secret:<name>/<key>" and
// "resource:<resource>" for the mapping to replace.
func (r *rendered) resolvedEnv(t *testing.T, c *corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("container %s: envFrom other than a ConfigMap", c.Name)
			continue
		}
		cm, ok := r.configMaps[ef.ConfigMapRef.Name]
		if !ok {
			t.Errorf("container %s: envFrom ConfigMap %s is not rendered", c.Name, ef.ConfigMapRef.Name)
			continue
		}
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = "resource:" + e.ValueFrom.ResourceFieldRef.Resource
		default:
			t.Errorf("container %s: env %s from an unsupported source", c.Name, e.Name)
		}
	}
	return env
}

// command builds the process of one container.
func (m mapping) command(t *testing.T, r *rendered, bins map[string]string, pod *corev1.PodSpec, c *corev1.Container, name string) *process {
	t.Helper()
	image, _, _ := strings.Cut(c.Image, ":")
	bin, ok := bins[image]
	if !ok {
		t.Fatalf("%s: image %s is not a riftflow binary", name, c.Image)
	}
	if len(c.Command) > 0 {
		t.Fatalf("%s: command %v overrides the image's entrypoint", name, c.Command)
	}
	// Mounted Secret volumes become directories; the CA of the prod NATS
	// cluster is written where the nats-ca mount puts it.
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		local := filepath.Join(m.filesDir, strings.ReplaceAll(name, "/", "_"), vm.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == "nats-ca" && m.tlsDir != "" {
				ca, err := os.ReadFile(filepath.Join(m.tlsDir, "ca.crt"))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(local, "ca.crt"), ca, 0o600)
			}
		}
		mounts[strings.TrimSuffix(vm.MountPath, "/")] = local
	}
	mapPath := func(p string) (string, bool) {
		for mp, local := range mounts {
			if strings.HasPrefix(p, mp+"/") {
				return local + strings.TrimPrefix(p, mp), true
			}
		}
		return p, false
	}

	port := stagetest.FreePort(t)
	env := r.resolvedEnv(t, c)
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		switch {
		case k == "NATS_URL":
			if strings.HasPrefix(v, "tls://") != (m.tlsDir != "") {
				t.Fatalf("%s: NATS_URL %s, but the local cluster serves TLS = %v", name, v, m.tlsDir != "")
			}
			v = m.natsURL
		case k == "DATABASE_URL" && strings.HasPrefix(v, "secret:"):
			v = m.dbURL
		case k == "RIOT_API_KEY" && strings.HasPrefix(v, "secret:"):
			v = m.riotKey
		case k == "NATS_PASSWORD" && strings.HasPrefix(v, "secret:nats-users/"):
			pw, ok := m.users.byKey(strings.TrimPrefix(v, "secret:nats-users/"))
			if !ok {
				t.Fatalf("%s: NATS_PASSWORD=%s names no user of deploy/nats/auth.conf", name, v)
			}
			v = pw
		case k == "RIOT_API_BASE_URL":
			v = m.riotBase
		case k == "OTEL_EXPORTER_OTLP_ENDPOINT":
			v = m.otlp
		case k == "HTTP_ADDR":
			v = "127.0.0.1:" + strconv.Itoa(port)
		case v == "resource:limits.memory":
			v = strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10)
		case strings.HasPrefix(v, "secret:") || strings.HasPrefix(v, "resource:"):
			t.Fatalf("%s: %s=%s has no local mapping", name, k, v)
		case strings.HasPrefix(v, "/"):
			if local, ok := mapPath(v); ok {
				v = local
			}
		}
		out = append(out, k+"="+v)
	}
	if _, ok := env["HTTP_ADDR"]; !ok {
		out = append(out, "HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port))
	}
	sort.Strings(out)
	p := &process{name: name, env: out, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	p.cmd = exec.Command(bin, c.Args...)
	p.cmd.Env = out
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
		p.ready = c.ReadinessProbe.HTTPGet.Path
	}
	return p
}

// process is one running workload container.
type process struct {
	name  string
	env   []string
	base  string // http://127.0.0.1:<HTTP_ADDR port>
	ready string // readiness probe path
	cmd   *exec.Cmd
	out   stagetest.Logs
	done  chan struct{}
}

func (p *process) start(t *testing.T) {
	t.Helper()
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.done = make(chan struct{})
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) tail() string {
	s := p.out.String()
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return s
}

// waitReady polls the readiness probe as the kubelet would.
func (p *process) waitReady(t *testing.T, deadline time.Time) {
	t.Helper()
	if p.ready == "" {
		t.Errorf("%s has no readiness probe", p.name)
		return
	}
	for {
		if p.exited() {
			t.Errorf("%s exited before it was ready:\n%s", p.name, p.tail())
			return
		}
		resp, err := http.Get(p.base + p.ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("%s not ready (%s): %v\n%s", p.name, p.ready, err, p.tail())
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startNATSCluster starts three clustered JetStream servers in this
// process. With users, each includes the generated deploy/nats/auth.conf
// (streams.Grants), as the chart's server does (values-prod.yaml), and
// reads the passwords from its environment (NATS_PASSWORD_<USER>).
func startNATSCluster(t *testing.T, users natsUsers, tlsDir string) string {
	t.Helper()
	const n = 3
	routePorts := []int{stagetest.FreePort(t), stagetest.FreePort(t), stagetest.FreePort(t)}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
	}
	var urls []string
	var servers []*server.Server
	var authConf []byte
	if len(users) > 0 {
		var err error
		if authConf, err = os.ReadFile(filepath.Join("nats", "auth.conf")); err != nil {
			t.Fatal(err)
		}
		for user, pw := range users {
			t.Setenv(streams.PasswordEnv(user), pw)
		}
	}
	var rs []string
	for _, u := range routes {
		rs = append(rs, u.String())
	}
	var tlsBlock string
	if tlsDir != "" {
		tlsBlock = fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q }",
			filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key"), filepath.Join(tlsDir, "ca.crt"))
	}
	for i := 0; i < n; i++ {
		conf := fmt.Sprintf(`server_name: nats-%d
listen: "127.0.0.1:-1"
max_payload: 8MB
jetstream { store_dir: %q }
cluster { name: riftflow-test, listen: "127.0.0.1:%d", routes: [%s] }
%s
`, i, t.TempDir(), routePorts[i], strings.Join(rs, ", "), tlsBlock)
		dir := t.TempDir()
		if authConf != nil {
			conf += "include ./auth.conf\n"
			if err := os.WriteFile(filepath.Join(dir, "auth.conf"), authConf, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("nats config: %v\n%s", err, conf)
		}
		if len(users) > 0 && len(o.Users) != len(users) {
			t.Fatalf("nats: auth.conf declares %d users, streams.Grants %d", len(o.Users), len(users))
		}
		o.NoLog, o.NoSigs = true, true
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	for _, s := range servers {
		go s.Start()
	}
	for _, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatal("nats: a server did not start")
		}
		urls = append(urls, s.ClientURL()) // tls:// when the server serves TLS
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	// Wait for the JetStream meta leader: stream creation needs a quorum.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var leader bool
		for _, s := range servers {
			leader = leader || s.JetStreamIsLeader()
		}
		if leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nats: no JetStream meta leader")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return strings.Join(urls, ",")
}

// connect opens a client on the cluster, as the admin user when there are
// users.
func connect(t *testing.T, natsURL string, users natsUsers, tlsDir string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var opts []nats.Option
	if tlsDir != "" {
		opts = append(opts, nats.RootCAs(filepath.Join(tlsDir, "ca.crt")))
	}
	if pw, ok := users[streams.UserAdmin]; ok {
		opts = append(opts, nats.UserInfo(streams.UserAdmin, pw))
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return nc, natstest.Handle(t, nc)
}

// checkReplicas: every stream and KV bucket streams/ declares exists with
// want replicas.
func checkReplicas(t *testing.T, natsURL string, users natsUsers, tlsDir string, want int) {
	t.Helper()
	_, js := connect(t, natsURL, users, tlsDir)
	set, err := streams.Load(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := map[string]bool{}
	for _, s := range set.Streams {
		names[s.Name] = true
	}
	for _, b := range set.Buckets {
		names["KV_"+b.Bucket] = true
	}
	for name := range names {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		if got := s.CachedInfo().Config.Replicas; got != want {
			t.Errorf("stream %s has %d replicas, want %d", name, got, want)
		}
	}
}

// syntheticMatches is how many matches the simulator's synthetic player
// has: dated in the last days (so within every retention and the sync's
// lookback), each with a match record and (--derive-timelines) a timeline.
const syntheticMatches = 24

// startSim runs `riftflow sim` with one synthetic player of matches
// matches and returns the Riot base URL (with {route}) and the admin URL.
func startSim(t *testing.T, bin, key string, matches int) (base, admin string) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(stagetest.FreePort(t))
	p := &process{name: "riftflow sim", cmd: exec.Command(bin, "sim", "--addr", addr, "--key", key,
		"--synthetic-players", "1", "--synthetic-matches", strconv.Itoa(matches), "--derive-timelines")}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p.cmd.Dir = ".." // the recorded responses are found from the repository
	p.start(t)
	admin = "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(admin + "/sim/players")
		if err == nil {
			resp.Body.Close()
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("riftflow sim did not start:\n%s", p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return admin + "/{route}", admin
}

type simPlayer struct {
	PUUID    string `json:"puuid"`
	Platform string `json:"platform"`
	// Stored is how many of its matches the simulator serves (matchOk),
	// Timelines how many of their timelines (timelineOk).
	Stored, Timelines int
}

// demoPlayer is the simulator's synthetic player, with the counts of its
// matches and timelines the simulator serves (GET /sim/truth).
func demoPlayer(t *testing.T, admin string) simPlayer {
	t.Helper()
	var ps []simPlayer
	getJSON(t, admin+"/sim/players", &ps)
	var truth struct {
		Players map[string]struct {
			Matches []struct {
				MatchOK    bool `json:"matchOk"`
				TimelineOK bool `json:"timelineOk"`
			} `json:"matches"`
		} `json:"players"`
	}
	getJSON(t, admin+"/sim/truth", &truth)
	for _, p := range ps {
		if !strings.HasPrefix(p.PUUID, "synth-") {
			continue
		}
		for _, m := range truth.Players[p.PUUID].Matches {
			if m.MatchOK {
				p.Stored++
			}
			if m.TimelineOK {
				p.Timelines++
			}
		}
		if p.Stored != syntheticMatches || p.Timelines != syntheticMatches {
			t.Fatalf("the synthetic player has %d fetchable matches and %d timelines, want %d of each", p.Stored, p.Timelines, syntheticMatches)
		}
		return p
	}
	t.Fatal("the simulator has no synthetic player")
	return simPlayer{}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// apiCall sends body (JSON, "" for none) to base+path with the bearer
// token (none when "") and decodes the answer into out (when not nil); it
// returns the status code.
func apiCall(t *testing.T, base, method, path, token, body string, out any) int {
	t.Helper()
	resp, err := send(context.Background(), method, base+path, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// send makes the request the test's API calls make: body as JSON ("" for
// none), the bearer token (none when "").
func send(ctx context.Context, method, u, token, body string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// progress is the part of a progress event (bus.ProgressEvent) the test reads.
type progress struct {
	Status   string `json:"status"`
	Progress int    `json:"progress"`
	Total    int    `json:"total"`
}

// lastSSEEvent follows a Server-Sent Events stream of progress events until
// it ends (the server closes it after the sync's last event) or timeout,
// and returns the last event.
func lastSSEEvent(t *testing.T, u, token string, timeout time.Duration) progress {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := send(ctx, http.MethodGet, u, token, "")
	if err != nil {
		t.Errorf("GET %s: %v", u, err)
		return progress{}
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("GET %s: %d %q, want 200 text/event-stream", u, resp.StatusCode, ct)
	}
	var last progress
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			json.Unmarshal([]byte(strings.TrimSpace(data)), &last)
		}
	}
	return last
}

// waitMatchesStored waits until every match and timeline of p the
// simulator serves is in Postgres, or timeout; it returns the counts.
func waitMatchesStored(t *testing.T, dbURL string, p simPlayer, timeout time.Duration) (matches, timelines int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(timeout)
	for {
		err := conn.QueryRow(ctx, `SELECT count(DISTINCT pp.match_id), count(DISTINCT tl.match_id)
FROM match_participants pp JOIN matches m USING (match_id) LEFT JOIN match_timelines tl USING (match_id)
WHERE pp.puuid = $1`, p.PUUID).Scan(&matches, &timelines)
		if err != nil {
			t.Fatalf("count stored matches: %v", err)
		}
		if matches == p.Stored && timelines == p.Timelines {
			return matches, timelines
		}
		if matches > p.Stored || timelines > p.Timelines || time.Now().After(deadline) {
			t.Errorf("%d matches and %d timelines stored, want %d and %d", matches, timelines, p.Stored, p.Timelines)
			return matches, timelines
		}
		time.Sleep(time.Second)
	}
}

// checkAdminRoutes runs the API's admin routes (scope admin) against the
// running overlay, so each runs as the API's NATS user under the
// cluster's permissions: the pause switch (control bucket), a ledger
// retry (fetch commands), a dead-letter replay (refused with 403: only the
// NATS admin may republish other services' messages, `riftflow retry
// --dead`), and forgetting the player (cursors, locks, Riot ID cache).
// Without NATS users (dev) the replay is allowed and replays nothing.
func checkAdminRoutes(t *testing.T, base, admin, puuid string, natsUsers bool) {
	t.Helper()
	var st struct {
		Paused bool `json:"paused"`
	}
	for _, paused := range []bool{true, false} {
		if code := apiCall(t, base, http.MethodPut, "/v1/admin/pause", admin, fmt.Sprintf(`{"paused":%v,"reason":"deploy test"}`, paused), nil); code != http.StatusOK {
			t.Errorf("PUT /v1/admin/pause paused=%v: %d", paused, code)
		}
		if code := apiCall(t, base, http.MethodGet, "/v1/admin/pause", admin, "", &st); code != http.StatusOK || st.Paused != paused {
			t.Errorf("GET /v1/admin/pause = %d %+v, want paused=%v", code, st, paused)
		}
	}
	var retry struct {
		Reopened []string `json:"reopened"`
	}
	// The API's switch follows the control bucket through a watch, so a
	// route that changes something may answer 503 ("syncing is paused")
	// for a moment after the PUT that resumed it (seen once: the DELETE
	// below). The first such call is repeated while it does, as a client
	// honouring Retry-After would.
	code := apiCall(t, base, http.MethodPost, "/v1/admin/retry", admin, `{"all":true}`, &retry)
	for deadline := time.Now().Add(30 * time.Second); code == http.StatusServiceUnavailable && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		code = apiCall(t, base, http.MethodPost, "/v1/admin/retry", admin, `{"all":true}`, &retry)
	}
	if code != http.StatusOK || len(retry.Reopened) != 0 {
		t.Errorf("POST /v1/admin/retry all = %d %+v, want 200 and nothing reopened", code, retry)
	}
	var problem struct {
		Detail string `json:"detail"`
	}
	code = apiCall(t, base, http.MethodPost, "/v1/admin/retry", admin, `{"dead":true}`, &problem)
	switch {
	case natsUsers && (code != http.StatusForbidden || !strings.Contains(problem.Detail, "riftflow retry --dead")):
		t.Errorf("POST /v1/admin/retry dead = %d %+v, want 403 naming `riftflow retry --dead`", code, problem)
	case !natsUsers && code != http.StatusOK:
		t.Errorf("POST /v1/admin/retry dead without NATS users = %d %+v, want 200", code, problem)
	}
	var forgot struct {
		KVKeys []string `json:"kv_buckets"`
	}
	if code := apiCall(t, base, http.MethodDelete, "/v1/admin/accounts/"+puuid, admin, "", &forgot); code != http.StatusOK {
		t.Errorf("DELETE /v1/admin/accounts/… = %d %+v, want 200", code, forgot)
	}
	if code := apiCall(t, base, http.MethodGet, "/v1/players/"+puuid, admin, "", nil); code != http.StatusNotFound {
		t.Errorf("GET /v1/players/… after forget = %d, want 404", code)
	}
}

// checkAlertMetrics: every riftflow_/riot_ metric the PrometheusRule and
// the dashboard name is exported by a running workload, and every
// workload exports riftflow_build_info. Counters only appear once counted,
// so a few event-only ones (429s, key rejections, 5xx outcomes) may be
// missing after a clean ingest; they are listed in eventOnly.
func checkAlertMetrics(t *testing.T, r *rendered, procs []*process) {
	t.Helper()
	exported := map[string]bool{}
	for _, p := range procs {
		resp, err := http.Get(p.base + "/metrics")
		if err != nil {
			t.Errorf("%s /metrics: %v", p.name, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "riftflow_build_info{") {
			t.Errorf("%s exports no riftflow_build_info", p.name)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(name, "#") {
				exported[name] = true
			} else if f := strings.Fields(line); len(f) == 2 {
				exported[f[0]] = true
			}
		}
	}
	eventOnly := map[string]bool{"riftflow_ratelimit_429_total": true, "riftflow_ratelimit_key_rejected_total": true,
		"riftflow_consumer_paused_seconds_total": true}
	metricRef := regexp.MustCompile(`\b((?:riftflow|riot|http_server)_[a-z0-9_]+)`)
	var exprs []string
	for _, rule := range r.rules {
		for _, g := range rule.Spec.Groups {
			for _, rl := range g.Rules {
				exprs = append(exprs, rl.Expr.String())
			}
		}
	}
	if dash, err := os.ReadFile("components/monitoring/riftflow-dashboard.json"); err == nil {
		exprs = append(exprs, string(dash))
	}
	if len(exprs) == 0 {
		return
	}
	for _, e := range exprs {
		for _, m := range metricRef.FindAllStringSubmatch(e, -1) {
			name := m[1]
			if !exported[name] && !eventOnly[name] {
				t.Errorf("alert or dashboard metric %s is not exported by any workload", name)
			}
		}
	}
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// makeTLS writes a CA (ca.crt) and a server certificate for 127.0.0.1
// signed by it (tls.crt, tls.key) into a new directory.
func makeTLS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	from, until := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	ca, caKey := natstest.Issue(t, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "riftflow test CA"},
		NotBefore: from, NotAfter: until, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	cert, key := natstest.Issue(t, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: from, NotAfter: until,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"ca.crt": {Type: "CERTIFICATE", Bytes: ca.Raw},
		"tls.crt": {Type: "CERTIFICATE", Bytes: cert.Raw}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
