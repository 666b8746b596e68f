package sim

import (
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// scope is the kind of routing value an endpoint accepts.
type scope int

const (
	scopeAccount  scope = iota // americas, asia, europe
	scopeMatch                 // americas, asia, europe, sea
	scopePlatform              // na1, jp1, ...
)

// response is what an endpoint handler answers.
type response struct {
	status   int
	body     []byte
	gz       []byte // pre-compressed body, optional
	truncate bool   // send half of body under a full Content-Length
	pad      int    // append a padding field of pad bytes (oversized)
	forceGz  bool   // send gz with Content-Encoding gzip even if the request did not accept it
}

type handlerFunc func(r *http.Request, route string, now time.Time) response

// riotError is Riot's error body: {"status":{"message":...,"status_code":...}}.
func riotError(code int, msg string) response {
	b, _ := encode(map[string]any{"status": map[string]any{"message": msg, "status_code": code}})
	return response{status: code, body: b}
}

var statusText = map[int]string{
	400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Data not found",
	405: "Method not allowed", 429: "Rate limit exceeded", 500: "Internal server error",
	502: "Bad gateway", 503: "Service unavailable", 504: "Gateway timeout",
}

func jsonResp(v any) response {
	b, err := encode(v)
	if err != nil {
		return riotError(500, statusText[500])
	}
	return response{status: 200, body: b}
}

func (s *Sim) routes() *http.ServeMux {
	mux := http.NewServeMux()
	api := func(pattern, method string, sc scope, h handlerFunc) {
		mux.Handle("GET "+pattern, s.api(method, sc, h))
	}
	api("/{route}/riot/account/v1/accounts/by-riot-id/{gameName}/{tagLine}", MethodAccountByRiotID, scopeAccount, s.getByRiotID)
	api("/{route}/riot/account/v1/accounts/by-puuid/{puuid}", MethodAccountByPUUID, scopeAccount, s.getAccountByPUUID)
	api("/{route}/riot/account/v1/region/by-game/{game}/by-puuid/{puuid}", MethodActiveRegion, scopeAccount, s.getActiveRegion)
	api("/{route}/lol/match/v5/matches/by-puuid/{puuid}/ids", MethodMatchIDs, scopeMatch, s.getMatchIDs)
	api("/{route}/lol/match/v5/matches/{matchId}", MethodMatch, scopeMatch, s.getMatch)
	api("/{route}/lol/match/v5/matches/{matchId}/timeline", MethodTimeline, scopeMatch, s.getTimeline)
	api("/{route}/lol/league/v4/entries/by-puuid/{puuid}", MethodLeagueByPUUID, scopePlatform, s.getLeague)
	api("/{route}/lol/summoner/v4/summoners/by-puuid/{puuid}", MethodSummonerByPUUID, scopePlatform, s.getSummoner)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Riot: 403 for an "incorrect/unsupported path".
		s.send(w, r, "", "", riotError(403, "Forbidden"))
	})
	s.adminRoutes(mux)
	return mux
}

func routeOK(route string, sc scope) bool {
	switch sc {
	case scopeAccount:
		return validRegion(route, true)
	case scopeMatch:
		return validRegion(route, false)
	}
	p, err := riot.ParsePlatform(route)
	return err == nil && string(p) == route && p != "pbe1"
}

// api wraps an endpoint with Riot's edge: auth, blacklist, rate limits,
// faults, 404 accounting.
func (s *Sim) api(method string, sc scope, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.PathValue("route")
		key := r.Header.Get("X-Riot-Token")
		if key == "" {
			key = r.URL.Query().Get("api_key")
		}
		if key == "" {
			s.send(w, r, route, method, riotError(401, "Unauthorized"))
			return
		}
		if subtle.ConstantTimeCompare([]byte(key), []byte(s.opts.APIKey)) != 1 {
			s.send(w, r, route, method, riotError(403, "Forbidden"))
			return
		}
		if !routeOK(route, sc) {
			s.send(w, r, route, method, riotError(403, "Forbidden"))
			return
		}
		// The arrival time is read under the lock that serialises the
		// counters, as Riot's are: read before it, a request that waited
		// for the lock would be counted after a later one, in a window
		// that began after it arrived (an over-count no client causes).
		s.mu.Lock()
		now := s.now()
		if s.blacklisted(now) {
			s.mu.Unlock()
			s.send(w, r, route, method, riotError(403, "Forbidden"))
			return
		}
		hdr := w.Header()
		if !s.countRate(w, r, route, method, now) {
			return
		}
		d := s.draw(method)
		var mf MatchFault
		var hasMF bool
		if id := r.PathValue("matchId"); id != "" {
			mf, hasMF = s.matchFault(method, id)
		}
		if hasMF && mf.Kind == FaultServer429N {
			d.status, d.limitType, d.retry = 429, "server", max(s.faults.ServerRetryAfter, 1)
			if s.faults.ServerRetryAfter <= 0 {
				d.retry = 5
			}
		}
		if d.slow > 0 {
			s.stats.Faults["slow"]++
		}
		s.mu.Unlock()

		if d.slow > 0 {
			select {
			case <-time.After(d.slow):
			case <-r.Context().Done():
				s.mu.Lock()
				s.stats.notePerMatch(method, r.PathValue("matchId"), true)
				s.mu.Unlock()
				return // client gave up
			}
		}
		var resp response
		switch {
		case d.status == 429:
			kind := "service"
			if d.limitType != "" {
				kind = d.limitType
				hdr.Set("X-Rate-Limit-Type", d.limitType)
				hdr.Set("Retry-After", strconv.Itoa(d.retry))
			}
			s.countFault(kind+"429", func() { s.stats.RateLimited[kind]++ })
			resp = riotError(429, statusText[429])
		case d.status != 0:
			s.countFault(strconv.Itoa(d.status), nil)
			resp = riotError(d.status, statusText[d.status])
		case hasMF:
			resp = s.matchFaultResp(r, route, now, h, mf)
		default:
			resp = h(r, route, now)
		}
		if resp.status == 404 {
			s.mu.Lock()
			s.noteViolation(now, false)
			s.mu.Unlock()
		}
		s.send(w, r, route, method, resp)
	})
}

// countRate counts the request in the rate-limit windows of route and
// method at now and sets the limit and count headers. Over a limit, it
// answers the client-caused 429 (logged), releases s.mu and returns false.
// Callers hold s.mu.
func (s *Sim) countRate(w http.ResponseWriter, r *http.Request, route, method string, now time.Time) bool {
	if s.opts.Limits.Disabled {
		return true
	}
	hdr := w.Header()
	rl := s.limits.take(route, method, now, s.faults.ReverseHeaders)
	hdr.Set("X-App-Rate-Limit", rl.appLimit)
	hdr.Set("X-App-Rate-Limit-Count", rl.appCount)
	hdr.Set("X-Method-Rate-Limit", rl.methodLimit)
	hdr.Set("X-Method-Rate-Limit-Count", rl.methodCount)
	if rl.limitType == "" {
		return true
	}
	s.stats.RateLimited[rl.limitType]++
	s.stats.Violations++
	s.noteViolation(now, true)
	s.mu.Unlock()
	s.log.Warn("client-caused 429", "route", route, "method", method, "type", rl.limitType,
		"app_count", rl.appCount, "method_count", rl.methodCount, "retry_after_s", rl.retryAfter)
	hdr.Set("Retry-After", strconv.Itoa(rl.retryAfter))
	hdr.Set("X-Rate-Limit-Type", rl.limitType)
	s.send(w, r, route, method, riotError(429, statusText[429]))
	return false
}

func (s *Sim) countFault(kind string, also func()) {
	s.mu.Lock()
	s.stats.Faults[kind]++
	if also != nil {
		also()
	}
	s.mu.Unlock()
}

func (s *Sim) matchFaultResp(r *http.Request, route string, now time.Time, h handlerFunc, mf MatchFault) response {
	s.countFault(mf.Kind, nil)
	switch mf.Kind {
	case FaultNotFound, FaultNotFoundN:
		return riotError(404, "Data not found - match file not found")
	case FaultUnavailableN:
		return riotError(503, statusText[503])
	}
	resp := h(r, route, now)
	if resp.status != 200 {
		return resp
	}
	resp.gz = nil
	switch mf.Kind {
	case FaultPoison:
		resp.body = append(append([]byte(nil), resp.body[:len(resp.body)/3]...), []byte(`,"sim":poison}`)...)
	case FaultTruncated:
		resp.truncate = true
	case FaultOversized:
		resp.pad = mf.N
		if resp.pad <= 0 {
			resp.pad = 16 << 20
		}
	case FaultGzipBomb:
		// Compressed once per path: inflating is the client's cost, not ours.
		key := r.URL.Path + "|" + strconv.Itoa(mf.N)
		if v, ok := s.bombs.Load(key); ok {
			resp.gz = v.([]byte)
		} else {
			resp.gz = gzipBomb(resp.body, mf.N)
			s.bombs.Store(key, resp.gz)
		}
		resp.forceGz = true
	case FaultDeepJSON:
		n := mf.N
		if n <= 0 {
			n = 100_000
		}
		field := append(append([]byte(`"simDeep":`), bytes.Repeat([]byte("["), n)...), bytes.Repeat([]byte("]"), n)...)
		resp.body = insertInfoField(resp.body, field)
	case FaultNUL:
		b := bytes.Replace(resp.body, []byte(`"riotIdGameName":"`), []byte(`"riotIdGameName":"\u0000`), 1)
		resp.body = insertInfoField(b, []byte(`"simNul":"a\u0000b"`))
	}
	return resp
}

// insertInfoField adds field ("name":value) as the first field of the
// body's "info" object (or of the body when there is none).
func insertInfoField(body, field []byte) []byte {
	at := bytes.Index(body, []byte(`"info":{`))
	if at < 0 {
		at = bytes.IndexByte(body, '{') + 1
	} else {
		at += len(`"info":{`)
	}
	out := make([]byte, 0, len(body)+len(field)+1)
	out = append(append(append(out, body[:at]...), field...), ',')
	return append(out, body[at:]...)
}

// gzipBomb gzips body with a padding field of n bytes (default 1 GiB)
// appended: a small body that inflates to n bytes and more.
func gzipBomb(body []byte, n int) []byte {
	if n <= 0 {
		n = 1 << 30
	}
	body = bytes.TrimRight(body, " \n")
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(body[:len(body)-1])
	zw.Write([]byte(`,"simPadding":"`))
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for left := n; left > 0; left -= len(chunk) {
		zw.Write(chunk[:min(left, len(chunk))])
	}
	zw.Write([]byte(`"}`))
	zw.Close()
	return buf.Bytes()
}

// acceptsGzip reports whether Accept-Encoding allows gzip (or *) with a
// non-zero q.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		enc = strings.TrimSpace(enc)
		if !strings.EqualFold(enc, "gzip") && enc != "*" {
			continue
		}
		q := 1.0
		if k, v, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.TrimSpace(k) == "q" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				q = f
			}
		}
		return q > 0
	}
	return false
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// send writes resp and records it in the stats.
func (s *Sim) send(w http.ResponseWriter, r *http.Request, route, method string, resp response) {
	h := w.Header()
	h.Set("Content-Type", "application/json;charset=utf-8")
	// Stats are recorded before the answer leaves, so a client that has
	// seen its response also sees it counted; bytes are the planned length.
	record := func(n int) {
		s.mu.Lock()
		s.stats.record(route, method, resp.status, int64(n))
		if method == MethodMatch {
			s.stats.MatchCalls[r.PathValue("matchId")]++
		}
		// A client that has given up (its timeout while the answer was
		// late, whatever made it late) saw a failure, not this answer.
		s.stats.notePerMatch(method, r.PathValue("matchId"), resp.status != 200 || resp.truncate || r.Context().Err() != nil)
		s.mu.Unlock()
	}
	switch {
	case resp.truncate:
		h.Set("Content-Length", strconv.Itoa(len(resp.body)))
		record(len(resp.body) / 2)
		w.WriteHeader(resp.status)
		w.Write(resp.body[:len(resp.body)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	case resp.pad > 0:
		body := bytes.TrimRight(resp.body, " \n")
		head := body[:len(body)-1] // drop the closing '}'
		pre, post := []byte(`,"simPadding":"`), []byte(`"}`)
		total := len(head) + len(pre) + resp.pad + len(post)
		h.Set("Content-Length", strconv.Itoa(total))
		record(total)
		w.WriteHeader(resp.status)
		w.Write(head)
		w.Write(pre)
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for left := resp.pad; left > 0; {
			c := min(left, len(chunk))
			if _, err := w.Write(chunk[:c]); err != nil {
				return
			}
			left -= c
		}
		w.Write(post)
	case resp.forceGz:
		h.Set("Content-Encoding", "gzip")
		h.Set("Content-Length", strconv.Itoa(len(resp.gz)))
		record(len(resp.gz))
		w.WriteHeader(resp.status)
		w.Write(resp.gz)
	default:
		body := resp.body
		if len(body) > 0 && acceptsGzip(r) {
			if resp.gz == nil {
				resp.gz = gzipBytes(body)
			}
			body = resp.gz
			h.Set("Content-Encoding", "gzip")
		}
		h.Add("Vary", "Accept-Encoding")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		record(len(body))
		w.WriteHeader(resp.status)
		w.Write(body)
	}
}

// ---- endpoints

func decryptError(puuid string) response {
	return riotError(400, "Bad Request - Exception decrypting "+puuid)
}

type accountDTO struct {
	PUUID    string `json:"puuid"`
	GameName string `json:"gameName,omitempty"`
	TagLine  string `json:"tagLine,omitempty"`
}

func (s *Sim) getByRiotID(r *http.Request, _ string, _ time.Time) response {
	name, tag := r.PathValue("gameName"), r.PathValue("tagLine")
	p := s.data.byRiotID[riotKey(name, tag)]
	if p == nil {
		return riotError(404, fmt.Sprintf("Data not found - No results found for player with riot id %s#%s", name, tag))
	}
	return jsonResp(accountDTO{p.PUUID, p.GameName, p.TagLine})
}

func (s *Sim) getAccountByPUUID(r *http.Request, _ string, _ time.Time) response {
	p := s.data.players[r.PathValue("puuid")]
	if p == nil {
		return decryptError(r.PathValue("puuid"))
	}
	return jsonResp(accountDTO{p.PUUID, p.GameName, p.TagLine})
}

// accountRegionDTO is account-v1 AccountRegionDTO.
type accountRegionDTO struct {
	PUUID  string `json:"puuid"`
	Game   string `json:"game"`
	Region string `json:"region"`
}

// getActiveRegion is account-v1 getActiveRegion: the player's platform (the
// one of their newest match) for game lol or tft; another game is 400, an
// unknown PUUID the decrypt error.
func (s *Sim) getActiveRegion(r *http.Request, _ string, _ time.Time) response {
	game := r.PathValue("game")
	if game != "lol" && game != "tft" {
		return riotError(400, "Bad Request - Invalid game "+game)
	}
	p := s.data.players[r.PathValue("puuid")]
	if p == nil {
		return decryptError(r.PathValue("puuid"))
	}
	if p.Platform == "" {
		return riotError(404, "Data not found - No active region found for player")
	}
	return jsonResp(accountRegionDTO{p.PUUID, game, p.Platform})
}

// matchlistEpoch is 2021-06-16T00:00:00Z: "the matchlist started storing
// timestamps on June 16th, 2021", so older matches are excluded whenever
// startTime is set (openapi match-v5.getMatchIdsByPUUID).
const matchlistEpoch = 1623801600

// MatchlistCap is the number of newest matches the matchlist serves per player.
const MatchlistCap = 1000

var rankedQueues = map[int]bool{420: true, 440: true, 410: true, 470: true}

// matchType classifies a match for the type= filter: ranked (420, 440 and
// the retired 410, 470), tourney (has a tournamentCode), tutorial (queues
// 2000–2020), else normal (queued games: 400, 430, 450, 480, 490, ...).
func matchType(m *match) string {
	switch {
	case m.tourney:
		return "tourney"
	case rankedQueues[m.queue]:
		return "ranked"
	case m.queue >= 2000 && m.queue <= 2020:
		return "tutorial"
	}
	return "normal"
}

func queryInt(q map[string][]string, key string, def int64) (int64, bool, error) {
	v, ok := q[key]
	if !ok || len(v) == 0 {
		return def, false, nil
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	return n, true, err
}

func (s *Sim) getMatchIDs(r *http.Request, route string, _ time.Time) response {
	puuid := r.PathValue("puuid")
	p := s.data.players[puuid]
	if p == nil {
		return decryptError(puuid)
	}
	q := r.URL.Query()
	start, _, err := queryInt(q, "start", 0)
	if err != nil || start < 0 {
		return riotError(400, "Bad Request - Invalid start")
	}
	count, _, err := queryInt(q, "count", 20)
	if err != nil || count < 0 || count > 100 {
		return riotError(400, "Bad Request - count must be between 0 and 100")
	}
	startTime, hasStart, err := queryInt(q, "startTime", 0)
	if err != nil {
		return riotError(400, "Bad Request - Invalid startTime")
	}
	endTime, hasEnd, err := queryInt(q, "endTime", 0)
	if err != nil {
		return riotError(400, "Bad Request - Invalid endTime")
	}
	queue, hasQueue, err := queryInt(q, "queue", 0)
	if err != nil {
		return riotError(400, "Bad Request - Invalid queue")
	}
	typ := q.Get("type")
	switch typ {
	case "", "ranked", "normal", "tourney", "tutorial":
	default:
		return riotError(400, "Bad Request - Invalid type")
	}
	ids := []string{}
	n := int64(0)
	for _, m := range p.matches {
		if string(m.region) != route {
			continue
		}
		sec := m.created / 1000
		if hasStart && (sec < startTime || sec < matchlistEpoch) {
			continue
		}
		if hasEnd && sec > endTime {
			continue
		}
		if hasQueue && int64(m.queue) != queue {
			continue
		}
		if typ != "" && matchType(m) != typ {
			continue
		}
		if n >= MatchlistCap {
			break
		}
		if n >= start && n < start+count {
			ids = append(ids, m.id)
		}
		n++
	}
	return jsonResp(ids)
}

// lookupMatch resolves the match ID of the path against the route.
func (s *Sim) lookupMatch(r *http.Request, route string) (*match, response, bool) {
	id := r.PathValue("matchId")
	_, reg, err := riot.ParseMatchID(id)
	if err != nil {
		return nil, riotError(400, "Bad Request - Invalid matchId"), false
	}
	m := s.data.matches[id]
	if string(reg) != route || m == nil {
		return nil, riotError(404, "Data not found - match file not found"), false
	}
	return m, response{}, true
}

func retained(m *match, now time.Time, keep time.Duration) bool {
	return m.created == 0 || now.UnixMilli()-m.created <= keep.Milliseconds()
}

// payload is a served (patched) body and its gzip form, built once.
type payload struct {
	once      sync.Once
	plain, gz []byte
	err       error
}

func (s *Sim) body(m *match, timeline bool) ([]byte, []byte, error) {
	if m.tmpl != nil { // synthetic: rendered per request, nothing kept
		return s.synthBody(m, timeline)
	}
	key := "m|" + m.id
	if timeline {
		key = "t|" + m.id
	}
	v, _ := s.cache.LoadOrStore(key, &payload{})
	pl := v.(*payload)
	pl.once.Do(func() {
		p := patch{shift: s.shift, slot: -1}
		if m.origCreated == 0 {
			p.shift = 0
		}
		switch {
		case timeline && m.tl == nil && m.tlFrom != nil:
			pl.plain, pl.err = deriveTimeline(m)
		case timeline:
			pl.plain, pl.err = patchTimeline(m.tl, p)
		default:
			pl.plain, pl.err = patchMatch(m.raw, p)
		}
		if pl.err == nil {
			pl.gz = gzipBytes(pl.plain)
		}
	})
	return pl.plain, pl.gz, pl.err
}

func (s *Sim) getMatch(r *http.Request, route string, now time.Time) response {
	return s.serveMatch(r, route, now, false)
}

func (s *Sim) getTimeline(r *http.Request, route string, now time.Time) response {
	return s.serveMatch(r, route, now, true)
}

// serveMatch answers a match or, with timeline, its timeline: 404 past
// its retention (or for a match without a timeline), 500 when the recorded
// payload cannot be patched.
func (s *Sim) serveMatch(r *http.Request, route string, now time.Time, timeline bool) response {
	m, resp, ok := s.lookupMatch(r, route)
	if !ok {
		return resp
	}
	retention, what := MatchRetention, "patch match"
	if timeline {
		retention, what = TimelineRetention, "patch timeline"
	}
	if (timeline && !m.hasTimeline()) || !retained(m, now, retention) {
		return riotError(404, "Data not found - match file not found")
	}
	b, gz, err := s.body(m, timeline)
	if err != nil {
		s.log.Error(what, "match", m.id, "err", err)
		return riotError(500, statusText[500])
	}
	return response{status: 200, body: b, gz: gz}
}

// leagueEntry is league-v4 LeagueEntryDTO (openapi, 2025+ shape: no summonerId).
type leagueEntry struct {
	LeagueID     string `json:"leagueId"`
	PUUID        string `json:"puuid"`
	QueueType    string `json:"queueType"`
	Tier         string `json:"tier"`
	Rank         string `json:"rank"`
	LeaguePoints int    `json:"leaguePoints"`
	Wins         int    `json:"wins"`
	Losses       int    `json:"losses"`
	HotStreak    bool   `json:"hotStreak"`
	Veteran      bool   `json:"veteran"`
	FreshBlood   bool   `json:"freshBlood"`
	Inactive     bool   `json:"inactive"`
}

// pathPlayer is the player the request's {puuid} names, or nil and the
// answer Riot gives for a PUUID it cannot decrypt.
func (s *Sim) pathPlayer(r *http.Request) (string, *player, response) {
	puuid := r.PathValue("puuid")
	if p := s.data.players[puuid]; p != nil {
		return puuid, p, response{}
	}
	return puuid, nil, decryptError(puuid)
}

// getLeague answers league-v4 entries by PUUID. No real response of the new
// shape exists in the fixtures, so entries are SYNTHESIZED: one per ranked
// queue (420 solo, 440 flex) the player has matches in, with tier, rank, LP
// and record derived deterministically from the PUUID. A player of another
// platform gets [].
func (s *Sim) getLeague(r *http.Request, route string, _ time.Time) response {
	puuid, p, unknown := s.pathPlayer(r)
	if p == nil {
		return unknown
	}
	out := []leagueEntry{}
	if p.Platform != route {
		return jsonResp(out)
	}
	has := map[int]bool{}
	for _, m := range p.matches {
		has[m.queue] = true
	}
	tiers := []string{"IRON", "BRONZE", "SILVER", "GOLD", "PLATINUM", "EMERALD", "DIAMOND"}
	ranks := []string{"IV", "III", "II", "I"}
	for _, qt := range []struct {
		queue int
		name  string
	}{{420, "RANKED_SOLO_5x5"}, {440, "RANKED_FLEX_SR"}} {
		if !has[qt.queue] {
			continue
		}
		hf := fnv.New64a()
		hf.Write([]byte(puuid + qt.name))
		h := hf.Sum64()
		out = append(out, leagueEntry{
			LeagueID: fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", uint32(h), uint16(h>>32), uint16(h>>48), uint16(h>>8), h&0xffffffffffff),
			PUUID:    puuid, QueueType: qt.name, Tier: tiers[h%uint64(len(tiers))], Rank: ranks[(h>>8)%4],
			LeaguePoints: int((h >> 16) % 100), Wins: 20 + int((h>>24)%200), Losses: 20 + int((h>>32)%200),
		})
	}
	return jsonResp(out)
}

// summonerDTO is summoner-v4 SummonerDTO (2025+ shape: no id/accountId).
type summonerDTO struct {
	PUUID         string `json:"puuid"`
	ProfileIconID int    `json:"profileIconId"`
	RevisionDate  int64  `json:"revisionDate"` // epoch ms
	SummonerLevel int    `json:"summonerLevel"`
}

// getSummoner answers summoner-v4 by PUUID from the player's newest match
// (profileIcon, summonerLevel; revisionDate = its served gameCreation).
// A player of another platform is not found (404).
func (s *Sim) getSummoner(r *http.Request, route string, _ time.Time) response {
	_, p, unknown := s.pathPlayer(r)
	if p == nil {
		return unknown
	}
	if p.Platform != route {
		return riotError(404, "Data not found - summoner not found")
	}
	dto := summonerDTO{PUUID: p.PUUID, ProfileIconID: p.icon, SummonerLevel: p.level}
	if len(p.matches) > 0 {
		dto.RevisionDate = p.matches[0].created
	}
	return jsonResp(dto)
}

// ---- truth

// MatchTruth is what the sim will answer for one listed match.
type MatchTruth struct {
	ID           string `json:"id"`
	GameCreation int64  `json:"gameCreation"` // served (shifted) value, epoch ms
	MatchOK      bool   `json:"matchOk"`      // getMatch answers 200 (retention)
	TimelineOK   bool   `json:"timelineOk"`   // getTimeline answers 200
	HasTimeline  bool   `json:"hasTimeline"`  // a timeline exists in the data
	Participants int    `json:"participants"` // len(info.participants)
	Synthetic    bool   `json:"synthetic,omitempty"`
}

// PlayerTruth is one player's matchlist as the ids endpoint serves it on the
// player's region without filters: newest first, capped at MatchlistCap.
type PlayerTruth struct {
	Player
	Region  string       `json:"region"`
	Matches []MatchTruth `json:"matches"`
}

// Truth is the sim's ground truth at Now(), keyed by PUUID, for asserting
// the end state of an ingestion run (faults are not taken into account).
type Truth struct {
	Now     int64                  `json:"now"` // epoch ms
	Players map[string]PlayerTruth `json:"players"`
}

// Truth computes the ground truth at Now().
func (s *Sim) Truth() Truth {
	now := s.now()
	t := Truth{Now: now.UnixMilli(), Players: make(map[string]PlayerTruth, len(s.data.players))}
	for pu, p := range s.data.players {
		pt := PlayerTruth{Player: p.Player, Matches: []MatchTruth{}}
		if pl, err := riot.ParsePlatform(p.Platform); err == nil {
			pt.Region = string(pl.Region())
		}
		for _, m := range p.matches {
			if pt.Region != "" && string(m.region) != pt.Region {
				continue
			}
			if len(pt.Matches) >= MatchlistCap {
				break
			}
			pt.Matches = append(pt.Matches, MatchTruth{
				ID: m.id, GameCreation: m.created, MatchOK: retained(m, now, MatchRetention),
				HasTimeline: m.hasTimeline(), TimelineOK: m.hasTimeline() && retained(m, now, TimelineRetention),
				Participants: m.nPart, Synthetic: m.tmpl != nil,
			})
		}
		t.Players[pu] = pt
	}
	return t
}

// ---- admin API

func (s *Sim) adminRoutes(mux *http.ServeMux) {
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.Encode(v)
	}
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Stats()) })
	mux.HandleFunc("POST /sim/stats/reset", func(w http.ResponseWriter, r *http.Request) {
		s.ResetStats()
		w.WriteHeader(http.StatusNoContent)
	})
	// GET /sim/windows?route=americas&secs=10[&method=getMatch]: the ended
	// instances of that window (WindowHistory), oldest first.
	mux.HandleFunc("GET /sim/windows", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		secs, err := strconv.Atoi(q.Get("secs"))
		if err != nil || secs <= 0 || q.Get("route") == "" {
			writeJSON(w, 400, map[string]string{"error": "want route=<routing value>&secs=<window seconds>[&method=<method>]"})
			return
		}
		writeJSON(w, 200, s.WindowHistory(q.Get("route"), q.Get("method"), secs))
	})
	mux.HandleFunc("GET /sim/truth", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Truth()) })
	mux.HandleFunc("GET /sim/players", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Players()) })
	mux.HandleFunc("GET /sim/faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Faults()) })
	mux.HandleFunc("POST /sim/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		if err := s.SetFaults(f); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, 200, f)
	})
	mux.HandleFunc("POST /sim/blacklist/clear", func(w http.ResponseWriter, r *http.Request) {
		s.ClearBlacklist()
		w.WriteHeader(http.StatusNoContent)
	})
}
