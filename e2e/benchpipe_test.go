package e2e

// make bench-pipeline: the pipeline's throughput and memory against a
// reference, in one run. See docs/throughput.md for what it measures and
// the figures.
//
//	make bench-pipeline   (builds bin/, then runs BenchmarkPipelineProcesses)
//
// Setup: the simulator (in this process, rate limits off) serves
// BENCH_PIPELINE_PLAYERS synthetic na1 players × BENCH_PIPELINE_MATCHES
// matches (clones of recorded matches, with their timelines). Two fresh
// databases on the same Postgres, migrated alike (same tables, indexes,
// synchronous_commit).
//
//   - reference: the shortest correct path over the same data. 16 worker
//     goroutines GET each match and timeline from the simulator (gzip),
//     decompress once, decode the match into its columns and scan the
//     timeline, and two writers COPY the rows straight into matches,
//     match_participants, match_timelines and match_fetches (no staging,
//     no upsert, no queue).
//   - pipeline: nats-server (bin/natsnode, its own process) and the five
//     services as the built binaries (bin/resolver … bin/retry-sweeper),
//     one ingest request per player (mode full, background).
//
// Each is timed from its first request to the last pair stored. Every
// second the harness samples the stored pairs (CSV), each process's CPU
// time and VmRSS/VmHWM from /proc, and each service's Go heap
// (go_memstats_heap_inuse_bytes on /metrics).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	persister "github.com/riftflow/riftflow/services/persister"
	"github.com/riftflow/riftflow/streams"
)

var benchServices = []string{"resolver", "matchid-lister", "match-fetcher", "persister", "retry-sweeper"}

func envDefault(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envIntDefault(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func BenchmarkPipelineProcesses(b *testing.B) {
	bin := os.Getenv("BENCH_BIN")
	if bin == "" {
		b.Skip("BENCH_BIN (the directory of the built binaries) is not set; run make bench-pipeline")
	}
	players := envIntDefault("BENCH_PIPELINE_PLAYERS", 40)
	per := envIntDefault("BENCH_PIPELINE_MATCHES", 500)
	out := os.Getenv("BENCH_PIPELINE_OUT")
	if out == "" {
		out = b.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		b.Fatal(err)
	}
	admin := os.Getenv("BENCH_DATABASE_ADMIN_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	for b.Loop() {
		ctx := context.Background()
		const key = "RGAPI-bench-pipeline"
		s, err := sim.New(sim.Options{APIKey: key, FixturesDir: sim.FindFixtures(), NoEmbedded: true,
			Limits:    sim.RateLimits{Disabled: true},
			Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: per, Platform: "na1", WithTimelines: true}})
		if err != nil {
			b.Fatal(err)
		}
		base, err := s.Start("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		var ids []string
		pairs := 0
		var puuids []string
		for i := 1; i <= players; i++ {
			pu := sim.SyntheticPUUID("na1", i)
			puuids = append(puuids, pu)
			for _, m := range s.Truth().Players[pu].Matches {
				if m.MatchOK {
					ids = append(ids, m.ID)
					if m.TimelineOK {
						pairs++
					}
				}
			}
		}
		b.Logf("data: %d players, %d matches, %d with a timeline", players, len(ids), pairs)

		refURL := freshDatabase(b, admin, "riftflow_bench_ref")
		pipeURL := freshDatabase(b, admin, "riftflow_bench_pipe")

		samples := &sampleLog{}
		ref := runReference(b, ctx, base, key, refURL, ids, pairs, samples)
		pipe := runPipelineProcesses(b, ctx, bin, out, base, key, pipeURL, puuids, per, len(ids), pairs, samples)
		s.Close()

		report(b, out, ref, pipe, samples)
	}
}

// freshDatabase drops and creates name on the admin server and migrates it.
func freshDatabase(b *testing.B, admin, name string) string {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		b.Fatal(err)
	}
	u := strings.Replace(admin, "/postgres?", "/"+name+"?", 1)
	if !strings.Contains(u, name) {
		u = strings.TrimSuffix(admin, "/postgres") + "/" + name
	}
	if err := store.Migrate(ctx, u, nil); err != nil {
		b.Fatal(err)
	}
	return u
}

func dbName(url string) string {
	u := url[strings.LastIndexByte(url, '/')+1:]
	name, _, _ := strings.Cut(u, "?")
	return name
}

// sampleLog is the throughput-over-time series of both runs.
type sampleLog struct {
	mu   sync.Mutex
	rows []sampleRow
}

type sampleRow struct {
	run   string
	t     float64 // seconds since the run's start
	pairs int     // stored match+timeline pairs
	// matches stored, and (pipeline only) the messages waiting in the
	// FETCH and FETCHED streams: where the pipeline waits.
	matches, fetchQ, fetchedQ int
	procs                     map[string]procSample
}

type procSample struct {
	cpu       float64 // seconds
	rss, hwm  int64   // bytes
	heapInuse int64   // bytes, -1 when unknown
}

func (l *sampleLog) add(r sampleRow) {
	l.mu.Lock()
	l.rows = append(l.rows, r)
	l.mu.Unlock()
}

// runResult is one run's outcome.
type runResult struct {
	name     string
	pairs    int
	elapsed  time.Duration
	cpu      map[string]float64 // seconds per process over the run
	peakRSS  map[string]int64   // VmHWM
	peakHeap map[string]int64
}

func (r runResult) rate() float64 { return float64(r.pairs) / r.elapsed.Seconds() }

// readProc reads CPU seconds and VmRSS/VmHWM of pid.
func readProc(pid int) (procSample, bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, false
	}
	// Fields after the command (which may hold spaces): state is field 3.
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	stt, _ := strconv.ParseFloat(f[12], 64)
	p := procSample{cpu: (ut + stt) / 100, heapInuse: -1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, true
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			p.rss = n << 10
		case "VmHWM":
			p.hwm = n << 10
		}
	}
	return p, true
}

// postgresCPU sums the CPU seconds of the Postgres backends serving
// database db (their command line names it). Shared processes (WAL
// writer, checkpointer) and backends of other databases are not counted.
func postgresCPU(db string) float64 {
	ents, _ := os.ReadDir("/proc")
	total := 0.0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.HasPrefix(cmdline, []byte("postgres: ")) || !bytes.Contains(cmdline, []byte(" "+db+" ")) {
			continue
		}
		if p, ok := readProc(pid); ok {
			total += p.cpu
		}
	}
	return total
}

func countPairs(ctx context.Context, pool *pgxpool.Pool) int {
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM match_timelines`).Scan(&n)
	return n
}

// refPair is one match and its timeline, decoded once, ready to COPY.
type refPair struct {
	match    store.MatchRow
	parts    []store.ParticipantRow
	timeline store.TimelineRow
	hasTL    bool
	bufs     []*bytes.Buffer
	size     int
}

// runReference is the shortest correct path: GET, decompress once, decode,
// COPY.
func runReference(b *testing.B, ctx context.Context, base, key, dbURL string, ids []string, pairs int, log *sampleLog) runResult {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}}
	get := func(path string, buf *bytes.Buffer) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.ReplaceAll(base, "{route}", "americas")+path, nil)
		req.Header.Set("X-Riot-Token", key)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		gz, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		if resp.Header.Get("Content-Encoding") != "gzip" {
			buf.Reset()
			buf.Write(gz)
			return nil
		}
		return riot.Gunzip(buf, gz, 32<<20)
	}
	bufPool := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	work := make(chan string)
	rows := make(chan refPair, 16)
	var fetchers sync.WaitGroup
	start := time.Now()
	db := dbName(dbURL)
	cpu0 := readSelfAndPG(db)
	for range 16 { // as many in flight as the fetcher (FETCHER_CONCURRENCY)
		fetchers.Go(func() {
			for id := range work {
				mb, tb := bufPool.Get().(*bytes.Buffer), bufPool.Get().(*bytes.Buffer)
				if err := get("/lol/match/v5/matches/"+id, mb); err != nil {
					b.Error(err)
					continue
				}
				m, err := riot.DecodeMatch(mb.Bytes())
				if err != nil {
					b.Error(err)
					continue
				}
				plat, region, _ := riot.ParseMatchID(id)
				mr, parts := persister.MatchRows(id, string(plat), string(region), m, mb.Bytes(), time.Now())
				p := refPair{match: mr, parts: parts, bufs: []*bytes.Buffer{mb, tb}, size: mb.Len()}
				if err := get("/lol/match/v5/matches/"+id+"/timeline", tb); err == nil {
					var sc riot.DocScan
					if _, err := sc.Write(tb.Bytes()); err != nil {
						b.Error(err)
						continue
					}
					sc.Close()
					p.timeline = store.TimelineRow{MatchID: id, FrameIntervalMs: int(sc.FrameIntervalMs()),
						FrameCount: sc.FrameCount(), Raw: tb.Bytes(), FetchedAt: time.Now()}
					p.hasTL, p.size = true, p.size+tb.Len()
				}
				rows <- p
			}
		})
	}
	go func() {
		for _, id := range ids {
			work <- id
		}
		close(work)
		fetchers.Wait()
		close(rows)
	}()
	var writers sync.WaitGroup
	for range 2 {
		writers.Go(func() {
			var batch []refPair
			size := 0
			flush := func() {
				if len(batch) == 0 {
					return
				}
				if err := copyPairs(ctx, pool, batch); err != nil {
					b.Error(err)
				}
				for _, p := range batch {
					for _, buf := range p.bufs {
						buf.Reset()
						bufPool.Put(buf)
					}
				}
				batch, size = batch[:0], 0
			}
			for p := range rows {
				batch = append(batch, p)
				size += p.size
				if size >= 16<<20 {
					flush()
				}
			}
			flush()
		})
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for wait := true; wait; {
		select {
		case <-done:
			wait = false
		case <-tick.C:
		}
		log.add(sampleRow{run: "reference", t: time.Since(start).Seconds(), pairs: countPairs(ctx, pool)})
	}
	elapsed := time.Since(start)
	cpu1 := readSelfAndPG(db)
	got := countPairs(ctx, pool)
	if got != pairs {
		b.Errorf("reference stored %d pairs, want %d", got, pairs)
	}
	self, _ := readProc(os.Getpid())
	return runResult{name: "reference", pairs: got, elapsed: elapsed,
		cpu:     map[string]float64{"harness (sim + reference)": cpu1[0] - cpu0[0], "postgres": cpu1[1] - cpu0[1]},
		peakRSS: map[string]int64{"harness (sim + reference)": self.hwm}}
}

func readSelfAndPG(db string) [2]float64 {
	self, _ := readProc(os.Getpid())
	return [2]float64{self.cpu, postgresCPU(db)}
}

// copyPairs writes one batch in one transaction with COPY only.
func copyPairs(ctx context.Context, pool *pgxpool.Pool, batch []refPair) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"matches"}, []string{"match_id", "platform", "region", "queue_id",
			"game_mode", "game_type", "game_version", "patch", "map_id", "game_creation", "game_start", "game_end",
			"duration_s", "end_of_game_result", "participant_count", "raw", "fetched_at"},
			pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) {
				m := &batch[i].match
				return []any{m.MatchID, m.Platform, m.Region, m.QueueID, m.GameMode, m.GameType, m.GameVersion, m.Patch,
					m.MapID, m.GameCreation, m.GameStart, m.GameEnd, m.DurationS, m.EndOfGameResult, m.ParticipantCount,
					m.Raw, m.FetchedAt}, nil
			})); err != nil {
			return err
		}
		var parts []store.ParticipantRow
		var tls []store.TimelineRow
		for _, p := range batch {
			parts = append(parts, p.parts...)
			if p.hasTL {
				tls = append(tls, p.timeline)
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"match_participants"}, []string{"match_id", "participant_id", "puuid",
			"riot_id_game_name", "riot_id_tagline", "team_id", "champion_id", "champion_name", "champ_level",
			"team_position", "win", "kills", "deaths", "assists", "gold_earned", "cs", "vision_score",
			"damage_to_champions", "time_played_s", "placement", "individual_position", "role", "lane", "items",
			"summoner1_id", "summoner2_id", "gold_spent", "total_damage_taken", "damage_to_objectives", "wards_placed",
			"wards_killed"},
			pgx.CopyFromSlice(len(parts), func(i int) ([]any, error) {
				p := &parts[i]
				return []any{p.MatchID, p.ParticipantID, p.PUUID, p.RiotIDGameName, p.RiotIDTagline, p.TeamID,
					p.ChampionID, p.ChampionName, p.ChampLevel, p.TeamPosition, p.Win, p.Kills, p.Deaths, p.Assists,
					p.GoldEarned, p.CS, p.VisionScore, p.DamageToChampions, p.TimePlayedS, p.Placement,
					p.IndividualPosition, p.Role, p.Lane, p.Items, p.Summoner1ID, p.Summoner2ID, p.GoldSpent,
					p.TotalDamageTaken, p.DamageToObjectives, p.WardsPlaced, p.WardsKilled}, nil
			})); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"match_timelines"}, []string{"match_id", "frame_interval_ms",
			"frame_count", "raw", "fetched_at"},
			pgx.CopyFromSlice(len(tls), func(i int) ([]any, error) {
				t := &tls[i]
				return []any{t.MatchID, t.FrameIntervalMs, t.FrameCount, t.Raw, t.FetchedAt}, nil
			})); err != nil {
			return err
		}
		now := time.Now()
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"match_fetches"}, []string{"match_id", "kind", "status", "attempt",
			"game_creation", "fetched_at", "last_attempt_at", "http_status"},
			pgx.CopyFromSlice(len(batch)+len(tls), func(i int) ([]any, error) {
				if i < len(batch) {
					m := &batch[i].match
					return []any{m.MatchID, "match", "success", 1, m.GameCreation, now, now, 200}, nil
				}
				t := &tls[i-len(batch)]
				return []any{t.MatchID, "timeline", "success", 1, nil, now, now, 200}, nil
			}))
		return err
	})
}

// benchProc is one started process of the pipeline.
type benchProc struct {
	name, ops string
	cmd       *exec.Cmd
	peakHeap  int64
	last      procSample
}

func startProc(b *testing.B, out, name, path string, env []string, args ...string) *benchProc {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(filepath.Join(out, name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchProc{name: name, cmd: cmd}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		logf.Close()
	})
	return p
}

func waitHTTP(b testing.TB, url string, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("%s not ready within %v", url, within)
}

// streamMsgs is the number of messages in stream name (-1 when unknown).
func streamMsgs(ctx context.Context, js jetstream.JetStream, name string) int {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return -1
	}
	info, err := st.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// saveProfiles writes a CPU profile of the first seconds of the run
// (BENCH_PIPELINE_PROFILE_S) of service p to out/<service>.pprof, then its
// heap profile (in-use at that moment) to out/<service>.heap.pprof.
func saveProfiles(b *testing.B, p *benchProc, out string, seconds int) {
	save := func(path, file string) {
		resp, err := http.Get(fmt.Sprintf("http://%s%s", p.ops, path))
		if err != nil {
			b.Logf("profile %s: %v", p.name, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(out, p.name+file))
		if err != nil {
			b.Logf("profile %s: %v", p.name, err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Logf("profile %s: %v", p.name, err)
		}
	}
	save(fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), ".pprof")
	save("/debug/pprof/heap", ".heap.pprof")
}

func runPipelineProcesses(b *testing.B, ctx context.Context, bin, out, base, key, dbURL string, puuids []string, per, matches, pairs int, log *sampleLog) runResult {
	natsPort := stagetest.FreePort(b)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	storeDir := filepath.Join(b.TempDir(), "nats")
	nproc := startProc(b, out, "nats-server", filepath.Join(bin, "natsnode"), []string{"GOMEMLIMIT=96MiB"},
		"-port", strconv.Itoa(natsPort), "-store", storeDir)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", natsPort)); err == nil {
			c.Close()
			break
		}
		if i > 100 {
			b.Fatal("nats-server did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	common := []string{"NATS_URL=" + natsURL, "DATABASE_URL=" + dbURL, "RIOT_API_KEY=" + key,
		"RIOT_API_BASE_URL=" + base, "RIOT_SHARED_RATELIMIT=false", "SCHEDULE_ENABLE=false", "LOG_LEVEL=warn",
		"OTEL_TRACES_EXPORTER=none", "FETCHER_REGIONS=americas", "GOMEMLIMIT=" + envDefault("BENCH_PIPELINE_GOMEMLIMIT", "48MiB"),
		"FETCH_BACKOFF=1s,1s,1s,1s"}
	apply := exec.Command(filepath.Join(bin, "riftflow"), "streams", "apply")
	apply.Env = append(os.Environ(), common...)
	if outp, err := apply.CombinedOutput(); err != nil {
		b.Fatalf("streams apply: %v\n%s", err, outp)
	}
	profileS := envIntDefault("BENCH_PIPELINE_PROFILE_S", 0)
	if profileS > 0 {
		common = append(common, "DEBUG_PPROF=true")
	}
	procs := []*benchProc{nproc}
	for _, svc := range benchServices {
		port := stagetest.FreePort(b)
		p := startProc(b, out, svc, filepath.Join(bin, svc), append(common, fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", port)))
		p.ops = fmt.Sprintf("127.0.0.1:%d", port)
		procs = append(procs, p)
	}
	for _, p := range procs[1:] {
		waitHTTP(b, "http://"+p.ops+"/readyz", 60*time.Second)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	cpu0 := map[string]float64{}
	for _, p := range procs {
		s, _ := readProc(p.cmd.Process.Pid)
		cpu0[p.name] = s.cpu
	}
	self0 := readSelfAndPG(dbName(dbURL))
	start := time.Now()
	subj := bus.Subjects{}.IngestRequest()
	for _, pu := range puuids {
		req := bus.IngestRequest{RequestID: "bench-" + pu[:20], PUUID: pu, Platform: "na1", Mode: bus.ModeFull,
			Count: per, LookbackDays: 730, Priority: bus.Background, Trigger: "bench"}
		if _, err := natsx.Publish(ctx, js, subj, req); err != nil {
			b.Fatal(err)
		}
	}
	if profileS > 0 {
		for _, p := range procs[1:] {
			go saveProfiles(b, p, out, profileS)
		}
	}
	timeout := time.Duration(envIntDefault("BENCH_PIPELINE_TIMEOUT_S", 1800)) * time.Second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var got, gotMatches int
	for range tick.C {
		got = countPairs(ctx, pool)
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM matches`).Scan(&gotMatches)
		row := sampleRow{run: "pipeline", t: time.Since(start).Seconds(), pairs: got, matches: gotMatches,
			fetchQ: streamMsgs(ctx, js, streams.StreamFetch), fetchedQ: streamMsgs(ctx, js, streams.StreamFetched),
			procs: map[string]procSample{}}
		for _, p := range procs {
			if s, ok := readProc(p.cmd.Process.Pid); ok {
				if p.ops != "" {
					s.heapInuse = metricValue(p.ops, "go_memstats_heap_inuse_bytes")
					p.peakHeap = max(p.peakHeap, s.heapInuse)
				}
				p.last = s
				row.procs[p.name] = s
			}
		}
		log.add(row)
		if got >= pairs && gotMatches >= matches || time.Since(start) > timeout {
			break
		}
	}
	elapsed := time.Since(start)
	if got < pairs || gotMatches < matches {
		b.Errorf("pipeline stored %d pairs and %d matches within %v, want %d and %d", got, gotMatches, timeout, pairs, matches)
	}
	self1 := readSelfAndPG(dbName(dbURL))
	res := runResult{name: "pipeline", pairs: got, elapsed: elapsed, cpu: map[string]float64{}, peakRSS: map[string]int64{}, peakHeap: map[string]int64{}}
	for _, p := range procs {
		s, _ := readProc(p.cmd.Process.Pid)
		res.cpu[p.name] = s.cpu - cpu0[p.name]
		res.peakRSS[p.name] = s.hwm
		res.peakHeap[p.name] = p.peakHeap
	}
	res.cpu["harness (sim)"] = self1[0] - self0[0]
	res.cpu["postgres"] = self1[1] - self0[1]
	return res
}

func report(b *testing.B, out string, ref, pipe runResult, log *sampleLog) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-10s %8s %9s %10s\n", "run", "pairs", "seconds", "pairs/s")
	for _, r := range []runResult{ref, pipe} {
		fmt.Fprintf(&sb, "%-10s %8d %9.1f %10.1f\n", r.name, r.pairs, r.elapsed.Seconds(), r.rate())
	}
	ratio := pipe.rate() / ref.rate()
	fmt.Fprintf(&sb, "pipeline / reference: %.2f\n", ratio)
	for _, r := range []runResult{ref, pipe} {
		fmt.Fprintf(&sb, "\nCPU split, %s (CPU seconds, share of %0.fs × 2 cores; postgres: the run's backends only):\n", r.name, r.elapsed.Seconds())
		names := make([]string, 0, len(r.cpu))
		for n := range r.cpu {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&sb, "  %-26s %8.1f s %5.1f%%\n", n, r.cpu[n], 100*r.cpu[n]/(2*r.elapsed.Seconds()))
		}
	}
	fmt.Fprintf(&sb, "\npeak memory, pipeline processes:\n  %-16s %10s %12s\n", "process", "VmHWM MB", "heap MB (max)")
	names := make([]string, 0, len(pipe.peakRSS))
	for n := range pipe.peakRSS {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h := "-"
		if v := pipe.peakHeap[n]; v > 0 {
			h = fmt.Sprintf("%.1f", float64(v)/(1<<20))
		}
		fmt.Fprintf(&sb, "  %-16s %10.1f %12s\n", n, float64(pipe.peakRSS[n])/(1<<20), h)
	}
	b.Log(sb.String())
	fmt.Print(sb.String())
	_ = os.WriteFile(filepath.Join(out, "summary.txt"), []byte(sb.String()), 0o644)
	b.ReportMetric(ref.rate(), "ref-pairs/s")
	b.ReportMetric(pipe.rate(), "pipe-pairs/s")
	b.ReportMetric(ratio, "ratio")

	var csv strings.Builder
	csv.WriteString("run,t_s,pairs,pairs_per_s,matches,fetch_queue,fetched_queue\n")
	series := map[string][][2]float64{}
	prev := map[string]sampleRow{}
	for _, r := range log.rows {
		rate := 0.0
		if p, ok := prev[r.run]; ok && r.t > p.t {
			rate = float64(r.pairs-p.pairs) / (r.t - p.t)
		}
		prev[r.run] = r
		fmt.Fprintf(&csv, "%s,%.2f,%d,%.1f,%d,%d,%d\n", r.run, r.t, r.pairs, rate, r.matches, r.fetchQ, r.fetchedQ)
		series[r.run] = append(series[r.run], [2]float64{r.t, rate})
	}
	_ = os.WriteFile(filepath.Join(out, "throughput.csv"), []byte(csv.String()), 0o644)
	_ = os.WriteFile(filepath.Join(out, "throughput.svg"), []byte(throughputSVG(series)), 0o644)
	b.Logf("wrote %s/{summary.txt,throughput.csv,throughput.svg}", out)
}

// throughputSVG plots pairs/s over time (5-sample moving mean), one line per run.
func throughputSVG(series map[string][][2]float64) string {
	const w, h, pad = 800, 360, 50
	maxT, maxR := 1.0, 1.0
	for _, s := range series {
		for _, p := range s {
			maxT, maxR = max(maxT, p[0]), max(maxR, p[1])
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`, w, h)
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`,
		pad, h-pad, w-pad, h-pad, pad, pad, pad, h-pad)
	fmt.Fprintf(&sb, `<text x="%d" y="%d">time (s), max %.0f</text><text x="5" y="%d">pairs/s, max %.0f</text>`, w/2-40, h-15, maxT, pad-15, maxR)
	colors := map[string]string{"reference": "#1f77b4", "pipeline": "#d62728"}
	y := pad + 10
	for _, name := range []string{"reference", "pipeline"} {
		s := series[name]
		var pts []string
		for i := range s {
			lo := max(0, i-4)
			sum := 0.0
			for _, p := range s[lo : i+1] {
				sum += p[1]
			}
			mean := sum / float64(i+1-lo)
			x := pad + s[i][0]/maxT*float64(w-2*pad)
			yy := float64(h-pad) - mean/maxR*float64(h-2*pad)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, yy))
		}
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colors[name], strings.Join(pts, " "))
		fmt.Fprintf(&sb, `<text x="%d" y="%d" fill="%s">%s</text>`, w-pad-120, y, colors[name], name)
		y += 16
	}
	sb.WriteString(`</svg>`)
	return sb.String()
}
