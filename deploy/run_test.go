package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
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
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/streams"
)

// TestRenderedWorkloadsRun runs each overlay as an operator would: every
// Deployment's and Job's container becomes a local process of the binary
// its image names, started with exactly the rendered arguments and
// environment (env, envFrom ConfigMaps, GOMEMLIMIT from the memory limit,
// files of mounted Secrets). Only what points into the cluster is mapped:
//
//   - NATS_URL: a local 3-node JetStream cluster (the prod one serves TLS
//     and has the RIFTFLOW account with one nkey user per workload, whose
//     seeds are the files NATS_NKEY_SEED_FILE names),
//   - secretKeyRef DATABASE_URL: a fresh Postgres database,
//   - secretKeyRef RIOT_API_KEY and RIOT_API_BASE_URL: `riftflow sim`,
//   - OTEL_EXPORTER_OTLP_ENDPOINT: a local endpoint that accepts spans,
//   - HTTP_ADDR: a free local port per process (the probes' port),
//   - the paths of mounted Secret volumes: a directory per volume.
//
// In prod the local cluster serves TLS with a certificate of a CA made for
// the run, and the nats-ca Secret mount holds that CA (NATS_TLS_CA). Then it
// checks that the Job succeeds, every workload becomes ready and stays up,
// the HTTP API answers, the streams and KV buckets have the rendered
// STREAM_REPLICAS (3 in prod), an ingest through the API ends with the
// player's matches stored, and every riftflow_/riot_ metric the
// PrometheusRule uses is exported.
func TestRenderedWorkloadsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every workload of the overlays as processes")
	}
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

// natsUsers is the prod cluster's auth: nkey user -> seed.
type natsUsers map[string][]byte

func runOverlay(t *testing.T, dir string, bins map[string]string) {
	r := render(t, dir)
	prod := strings.HasSuffix(dir, "prod")

	// The users the prod overlay's workloads connect as: every seed file
	// NATS_NKEY_SEED_FILE names gets a fresh nkey, registered in the
	// RIFTFLOW account of the local cluster.
	users := natsUsers{}
	if prod {
		for _, w := range r.workloadContainers() {
			if path, ok := r.resolvedEnv(t, w.c)["NATS_NKEY_SEED_FILE"]; ok {
				user := strings.TrimSuffix(filepath.Base(path), ".nk")
				if _, done := users[user]; !done {
					kp, err := nkeys.CreateUser()
					if err != nil {
						t.Fatal(err)
					}
					seed, _ := kp.Seed()
					users[user] = seed
				}
			}
		}
		if len(users) < 6 {
			t.Fatalf("prod: %d NATS users found in the rendered env, want one per service", len(users))
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
	simBase, simURL := startSim(t, bins["riftflow/riftflow"], simKey)

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
	token := createToken(t, bins["riftflow/riftflow"], dbURL)
	body := fmt.Sprintf(`{"puuid":%q,"platform":%q,"mode":"full","lookback_days":730}`, player.PUUID, player.Platform)
	req, _ := http.NewRequest(http.MethodPost, api.base+"/v1/sync", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		RequestID string `json:"request_id"`
		Events    string `json:"events"`
	}
	json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || accepted.RequestID == "" {
		t.Fatalf("POST /v1/sync = %d %+v, want 202 with a request_id", resp.StatusCode, accepted)
	}
	if ev := firstSSEEvent(t, api.base+"/v1/sync/"+accepted.RequestID+"/events", token); ev == "" {
		t.Error("the SSE progress stream sent no event")
	}
	stored := waitMatchesStored(t, dbURL, player.PUUID, player.Stored, 3*time.Minute)
	t.Logf("%s: %d of %d matches of %s stored", dir, stored, player.Stored, player.PUUID[:8])

	// The workloads are still up, and export what the alerts read.
	for _, p := range procs {
		if p.exited() {
			t.Errorf("%s exited:\n%s", p.name, p.tail())
		}
	}
	checkAlertMetrics(t, r, procs)
}

// createToken makes an API token with scope sync in the database at dbURL
// with the CLI binary, as an operator does, and returns it.
func createToken(t *testing.T, cli, dbURL string) string {
	t.Helper()
	cmd := exec.Command(cli, "token", "create", "--name", "deploy-test", "--scopes", "sync")
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
	// Mounted Secret volumes become directories; the prod NATS users'
	// seeds are written where the mount puts them.
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
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == "nats-users" {
				for user, seed := range m.users {
					os.WriteFile(filepath.Join(local, user+".nk"), seed, 0o600)
				}
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

	port := freePort(t)
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
	out   lockedBuffer
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

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNATSCluster starts three clustered JetStream servers in this
// process. With users, they have the account RIFTFLOW (JetStream on) with
// one nkey user each, as the prod auth.conf declares.
func startNATSCluster(t *testing.T, users natsUsers, tlsDir string) string {
	t.Helper()
	const n = 3
	routePorts := []int{freePort(t), freePort(t), freePort(t)}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
	}
	var urls []string
	var servers []*server.Server
	var accounts string
	if len(users) > 0 {
		var nk []string
		for _, seed := range users {
			kp, _ := nkeys.FromSeed(seed)
			pub, _ := kp.PublicKey()
			nk = append(nk, fmt.Sprintf("{nkey: %s}", pub))
		}
		sort.Strings(nk)
		accounts = "accounts { RIFTFLOW { jetstream: enabled, users: [" + strings.Join(nk, ", ") + "] } }"
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
%s
`, i, t.TempDir(), routePorts[i], strings.Join(rs, ", "), accounts, tlsBlock)
		path := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("nats config: %v\n%s", err, conf)
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

// connect opens a client on the cluster, as one of users when there are.
func connect(t *testing.T, natsURL string, users natsUsers, tlsDir string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var opts []nats.Option
	if tlsDir != "" {
		opts = append(opts, nats.RootCAs(filepath.Join(tlsDir, "ca.crt")))
	}
	for _, seed := range users {
		kp, _ := nkeys.FromSeed(seed)
		pub, _ := kp.PublicKey()
		opts = append(opts, nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
		break
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
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

// startSim runs `riftflow sim` and returns the Riot base URL (with
// {route}) and the admin URL.
func startSim(t *testing.T, bin, key string) (base, admin string) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := &process{name: "riftflow sim", cmd: exec.Command(bin, "sim", "--addr", addr, "--key", key)}
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
	// Stored is how many of its matches have a match record (matchOk).
	Stored int
}

// demoPlayer is the simulator's first player, with the count of its
// matches the simulator serves.
func demoPlayer(t *testing.T, admin string) simPlayer {
	t.Helper()
	var ps []simPlayer
	getJSON(t, admin+"/sim/players", &ps)
	if len(ps) == 0 {
		t.Fatal("the simulator has no player")
	}
	var truth struct {
		Players map[string]struct {
			Matches []struct {
				MatchOK bool `json:"matchOk"`
			} `json:"matches"`
		} `json:"players"`
	}
	getJSON(t, admin+"/sim/truth", &truth)
	p := ps[0]
	for _, m := range truth.Players[p.PUUID].Matches {
		if m.MatchOK {
			p.Stored++
		}
	}
	if p.Stored == 0 {
		t.Fatal("the demo player has no fetchable match")
	}
	return p
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

// firstSSEEvent reads the first data line of a Server-Sent Events stream.
func firstSSEEvent(t *testing.T, u, token string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", u, err)
		return ""
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("GET %s: Content-Type %q, want text/event-stream", u, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			return strings.TrimSpace(data)
		}
	}
	return ""
}

// waitMatchesStored waits until want matches of puuid are in Postgres.
func waitMatchesStored(t *testing.T, dbURL, puuid string, want int, timeout time.Duration) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(timeout)
	var n int
	for {
		err := conn.QueryRow(ctx, `SELECT count(DISTINCT match_id) FROM match_participants WHERE puuid = $1`, puuid).Scan(&n)
		if err != nil {
			t.Fatalf("count stored matches: %v", err)
		}
		if n >= want {
			return n
		}
		if time.Now().After(deadline) {
			t.Errorf("%d of %d matches stored after %v", n, want, timeout)
			return n
		}
		time.Sleep(time.Second)
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
	eventOnly := map[string]bool{"riftflow_ratelimit_429_total": true, "riftflow_ratelimit_key_rejected_total": true}
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

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "riftflow test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"ca.crt": {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
