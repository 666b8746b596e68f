// Package sim is riftflow's Riot Games API simulator: an HTTP server that
// serves real recorded Riot responses (match-v5, account-v1, plus
// league-v4/summoner-v4 answers derived from them) with Riot's documented
// semantics, so the pipeline can run and be tested without the internet.
//
// What it imitates (from https://developer.riotgames.com/docs/portal and the
// API reference at https://developer.riotgames.com/apis):
//   - routing: regional routes (americas, asia, europe, sea) for account-v1
//     and match-v5, platforms (na1, jp1, ...) for league-v4 and summoner-v4;
//     account-v1 getActiveRegion answers a player's platform (that of their
//     newest match);
//     a match is only found on the region of its ID prefix;
//   - auth with the X-Riot-Token header or the api_key query: missing → 401,
//     wrong → 403;
//   - retention: matches older than 730 days and timelines older than 365
//     days answer 404, while the matchlist still lists them;
//   - matchlist parameters (start, count 0–100, startTime/endTime in epoch
//     seconds, queue, type) and the 1000-entry cap;
//   - rate limits in fixed windows anchored at the first call of each bucket,
//     with X-App-Rate-Limit(-Count), X-Method-Rate-Limit(-Count), 429 with
//     Retry-After and X-Rate-Limit-Type, and blacklisting (403 on every call)
//     after repeated violations;
//   - gzip when the client sends Accept-Encoding: gzip.
//
// On top of that it injects faults on demand (5xx, service and server 429s,
// slow answers, reversed rate-limit headers, per-match overrides) and can
// add a synthetic backlog of cloned real matches for load tests.
//
// Data comes from a small embedded subset (one real player's matches, see
// data/SOURCES.md) and, when Options.FixturesDir is set, from every file of a
// fixtures folder laid out like testdata/riot-fixtures (see FindFixtures).
// Recorded timestamps are re-dated by Options.Shift so the data looks recent.
//
// The admin API under /sim/ (no auth, not rate limited, JSON):
//
//	POST /sim/faults           body: Faults; replaces the active faults
//	GET  /sim/faults           the active Faults
//	GET  /sim/stats            Stats
//	POST /sim/stats/reset      ResetStats
//	GET  /sim/truth            Truth (per-PUUID listed matches, retention)
//	GET  /sim/players          []Player
//	POST /sim/blacklist/clear  ClearBlacklist
//
// Durations in JSON bodies (Faults.SlowDelay, Synthetic.Spacing) are
// nanoseconds, as encoding/json encodes time.Duration.
//
// Typical use:
//
//	s, err := sim.New(sim.Options{APIKey: key, FixturesDir: sim.FindFixtures()})
//	base, err := s.Start("127.0.0.1:0") // "http://127.0.0.1:PORT/{route}"
//	defer s.Close()
//	demo, _ := s.DemoPlayer()           // LugnutsK#000 on na1
package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// Method IDs used for method rate limits and in Stats, as Riot names them.
const (
	MethodAccountByRiotID = "account-v1.getByRiotId"
	MethodAccountByPUUID  = "account-v1.getByPuuid"
	MethodActiveRegion    = "account-v1.getActiveRegion"
	MethodMatchIDs        = "match-v5.getMatchIdsByPUUID"
	MethodMatch           = "match-v5.getMatch"
	MethodTimeline        = "match-v5.getTimeline"
	MethodLeagueByPUUID   = "league-v4.getLeagueEntriesByPUUID"
	MethodSummonerByPUUID = "summoner-v4.getByPUUID"
)

// Retention periods Riot applies (https://github.com/RiotGames/developer-relations/issues/902).
const (
	MatchRetention    = 730 * 24 * time.Hour
	TimelineRetention = 365 * 24 * time.Hour
)

// Options configures a Sim. The zero value is usable except for APIKey.
type Options struct {
	// APIKey is the key clients must send (X-Riot-Token or ?api_key=).
	// Required. It is never logged.
	APIKey string

	// FixturesDir, when set, adds every file of a folder laid out like
	// testdata/riot-fixtures (match/*.json, timeline/*.json, account/*.json)
	// to the embedded subset. See FindFixtures.
	FixturesDir string

	// NoEmbedded skips the embedded subset (then FixturesDir must be set or
	// only synthetic data is served).
	NoEmbedded bool

	// Now is the clock used for retention, rate-limit windows and
	// blacklisting. Default time.Now. Tests inject a fake clock.
	Now func() time.Time

	// Shift is added to every recorded timestamp (gameCreation,
	// gameStartTimestamp, gameEndTimestamp, timeline realTimestamp). When
	// zero it is computed so the newest loaded real match was created one
	// day before Now() at New. Use ShiftNone to serve recorded times as they
	// are.
	Shift time.Duration

	// Limits are the rate limits enforced; see RateLimits.
	Limits RateLimits

	// TimeScale stretches every rate-limit window and blacklist duration:
	// the real length is the nominal one times TimeScale (0.1 runs Riot's
	// "1 s" windows in 100 ms). Headers keep Riot's nominal numbers and
	// Retry-After is in nominal (scaled) seconds, so a client must apply the
	// same scale. Default 1.
	TimeScale float64

	// Faults are the initial faults; change them later with SetFaults or
	// POST /sim/faults.
	Faults Faults

	// Blacklist configures blacklisting after repeated violations.
	Blacklist Blacklist

	// Synthetic adds a synthetic backlog (clones of real payloads).
	Synthetic Synthetic

	// DeriveTimelines serves a timeline for every recorded match that has
	// none recorded: the recorded timeline of another match (of the same
	// platform when there is one), with metadata.matchId, info.gameId,
	// info.platformId, the participants' PUUIDs and realTimestamps rewritten
	// to the match. The frames are the other match's. The recordings hold
	// few timelines (1 of the demo player's 16 matches); `make run` sets this
	// so every stored match has one. Truth reports them as HasTimeline.
	DeriveTimelines bool

	// Logger receives operational events (blacklisting, fault changes).
	// Default: slog.Default(). Request lines are not logged.
	Logger *slog.Logger
}

// ShiftNone as Options.Shift disables re-dating (a shift of 1 ns, which
// rounds to zero milliseconds).
const ShiftNone = time.Nanosecond

// Sim is a running simulator. Its methods are safe for concurrent use.
type Sim struct {
	opts  Options
	now   func() time.Time
	log   *slog.Logger
	shift int64 // ms added to recorded timestamps
	// bombs caches gzip-bomb bodies by path and size (FaultGzipBomb).
	bombs sync.Map

	data *dataset

	cache sync.Map // cache key → *payload (re-dated real payloads)
	tmpls sync.Map // tmplKey → *compiledTemplate (synthetic payloads)

	mu      sync.Mutex
	limits  *limiter
	faults  Faults
	fstate  *faultState
	bl      blacklistState
	stats   statsState
	mux     *http.ServeMux
	srv     *http.Server
	srvDone chan struct{}
}

// New loads the data and builds a Sim. It fails when APIKey is empty, a
// rate-limit spec does not parse, FixturesDir cannot be read, or no data is
// loaded at all.
func New(opts Options) (*Sim, error) {
	if opts.APIKey == "" {
		return nil, errors.New("sim: Options.APIKey is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Sim{opts: opts, now: opts.Now, log: opts.Logger.With("component", "riot-sim")}
	lim, err := newLimiter(opts.Limits, opts.TimeScale)
	if err != nil {
		return nil, err
	}
	s.limits = lim
	ds, err := loadData(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Shift == ShiftNone:
		s.shift = 0
	case opts.Shift != 0:
		s.shift = opts.Shift.Milliseconds()
	case ds.newest > 0:
		target := s.now().Add(-24 * time.Hour).UnixMilli()
		s.shift = target - ds.newest
	}
	ds.applyShift(s.shift)
	if opts.DeriveTimelines {
		ds.deriveTimelines()
	}
	if opts.Synthetic.Players > 0 {
		if err := ds.addSynthetic(opts.Synthetic, s.now()); err != nil {
			return nil, err
		}
	}
	ds.finish()
	if len(ds.matches) == 0 && len(ds.players) == 0 {
		return nil, errors.New("sim: no data loaded")
	}
	s.data = ds
	if err := s.SetFaults(opts.Faults); err != nil {
		return nil, err
	}
	s.stats.reset()
	s.mux = s.routes()
	return s, nil
}

// Handler returns the simulator's HTTP handler (API and /sim/ admin API).
func (s *Sim) Handler() http.Handler { return s.mux }

// Start serves the simulator on addr, which must be a loopback address
// ("127.0.0.1:0" picks a free port), and returns the base URL template
// "http://127.0.0.1:PORT/{route}": replace {route} by a routing value
// ("americas", "na1"). Start fails if already started.
func (s *Sim) Start(addr string) (baseURL string, err error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("sim: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("sim: listen address %q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("sim: %w", err)
	}
	return s.Serve(ln)
}

// Serve serves the simulator on ln, whatever its address (`riftflow sim
// --expose`: a simulator in a pod, reached through a Service), and returns
// the base URL template "http://ADDR/{route}" of ln's address. Serve fails,
// closing ln, if already started.
func (s *Sim) Serve(ln net.Listener) (baseURL string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		ln.Close()
		return "", errors.New("sim: already started")
	}
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	s.srvDone = make(chan struct{})
	go func() {
		defer close(s.srvDone)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "err", err)
		}
	}()
	return "http://" + ln.Addr().String() + "/{route}", nil
}

// Close stops the server started by Start (no-op otherwise). It closes open
// connections, including slow responses in progress.
func (s *Sim) Close() error {
	s.mu.Lock()
	srv, done := s.srv, s.srvDone
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	<-done
	return err
}

// Shift returns the shift applied to recorded timestamps.
func (s *Sim) Shift() time.Duration { return time.Duration(s.shift) * time.Millisecond }

// validRegion reports whether route is one of the regional routes allowed by
// the endpoint family: account-v1 has no sea.
func validRegion(route string, account bool) bool {
	r := riot.Region(route)
	if account && r == riot.SEA {
		return false
	}
	return r.Valid()
}
