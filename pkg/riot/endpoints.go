package riot

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Method IDs as in the Riot OpenAPI spec, used as Call.Method and Error.Op.
const (
	MethodAccountByRiotID      = "account-v1.getByRiotId"
	MethodAccountByPUUID       = "account-v1.getByPuuid"
	MethodActiveRegion         = "account-v1.getActiveRegion"
	MethodMatchIDsByPUUID      = "match-v5.getMatchIdsByPUUID"
	MethodMatch                = "match-v5.getMatch"
	MethodTimeline             = "match-v5.getTimeline"
	MethodLeagueEntriesByPUUID = "league-v4.getLeagueEntriesByPUUID"
)

// maxPUUIDLen bounds a PUUID argument; Riot's are 78 characters.
const maxPUUIDLen = 128

func badRequest(op, route, format string, args ...any) *Error {
	return &Error{Kind: KindBadRequest, Op: op, Route: route, Msg: fmt.Sprintf(format, args...)}
}

func checkAccountRegion(op string, r Region) *Error {
	switch r {
	case Americas, Asia, Europe:
		return nil
	}
	return badRequest(op, string(r), "account-v1 serves only americas, asia and europe, not %q (see Platform.AccountRegion)", string(r))
}

func checkRegion(op string, r Region) *Error {
	if !r.Valid() {
		return badRequest(op, string(r), "unknown region %q", string(r))
	}
	return nil
}

func checkPUUID(op, route, puuid string) *Error {
	if puuid == "" || len(puuid) > maxPUUIDLen {
		return badRequest(op, route, "puuid must be 1..%d bytes, got %d", maxPUUIDLen, len(puuid))
	}
	return nil
}

// getJSON GETs req and decodes its JSON body into v, the value the caller
// starts from (an empty slice stays non-nil for "[]"). A body that does not
// decode is KindDecode. On any error the result is T's zero value.
func getJSON[T any](ctx context.Context, c *Client, req request, v T) (T, error) {
	var zero T
	body, err := c.get(ctx, req)
	if err != nil {
		return zero, err
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return zero, &Error{Kind: KindDecode, Op: req.method, Route: req.route, Status: 200, Err: err}
	}
	return v, nil
}

// AccountByRiotID looks up an account by Riot ID: account-v1 getByRiotId,
// GET /riot/account/v1/accounts/by-riot-id/{gameName}/{tagLine} on region
// (americas, asia or europe; any of them knows every account). A 404 is
// KindNotFound.
func (c *Client) AccountByRiotID(ctx context.Context, region Region, id RiotID) (Account, error) {
	const op = MethodAccountByRiotID
	if err := checkAccountRegion(op, region); err != nil {
		return Account{}, err
	}
	name, tag := strings.TrimSpace(id.GameName), strings.TrimSpace(id.TagLine)
	if name == "" || tag == "" {
		return Account{}, badRequest(op, string(region), "riot ID needs a game name and a tag line")
	}
	return c.account(ctx, request{
		route:    string(region),
		method:   op,
		template: "/riot/account/v1/accounts/by-riot-id/{gameName}/{tagLine}",
		path:     "/riot/account/v1/accounts/by-riot-id/" + url.PathEscape(name) + "/" + url.PathEscape(tag),
	})
}

// AccountByPUUID looks up an account by PUUID: account-v1 getByPuuid,
// GET /riot/account/v1/accounts/by-puuid/{puuid} on region (americas, asia
// or europe).
func (c *Client) AccountByPUUID(ctx context.Context, region Region, puuid string) (Account, error) {
	const op = MethodAccountByPUUID
	if err := checkAccountRegion(op, region); err != nil {
		return Account{}, err
	}
	if err := checkPUUID(op, string(region), puuid); err != nil {
		return Account{}, err
	}
	return c.account(ctx, request{
		route:    string(region),
		method:   op,
		template: "/riot/account/v1/accounts/by-puuid/{puuid}",
		path:     "/riot/account/v1/accounts/by-puuid/" + url.PathEscape(puuid),
	})
}

// ActiveRegion returns the platform a player last played League on:
// account-v1 getActiveRegion, GET
// /riot/account/v1/region/by-game/lol/by-puuid/{puuid} on region (americas,
// asia or europe; any of them knows every account). Riot answers
// AccountRegionDTO {"puuid","game","region"}, region being a platform
// routing value ("na1"). A 404 is KindNotFound; a region that is not a
// platform riftflow knows is KindDecode.
func (c *Client) ActiveRegion(ctx context.Context, region Region, puuid string) (Platform, error) {
	const op = MethodActiveRegion
	if err := checkAccountRegion(op, region); err != nil {
		return "", err
	}
	if err := checkPUUID(op, string(region), puuid); err != nil {
		return "", err
	}
	req := request{
		route:    string(region),
		method:   op,
		template: "/riot/account/v1/region/by-game/lol/by-puuid/{puuid}",
		path:     "/riot/account/v1/region/by-game/lol/by-puuid/" + url.PathEscape(puuid),
	}
	ar, err := getJSON(ctx, c, req, AccountRegion{})
	if err != nil {
		return "", err
	}
	p, perr := ParsePlatform(ar.Region)
	if perr != nil {
		return "", &Error{Kind: KindDecode, Op: op, Route: req.route, Status: 200, Msg: "active region: " + perr.Error()}
	}
	return p, nil
}

func (c *Client) account(ctx context.Context, req request) (Account, error) {
	a, err := getJSON(ctx, c, req, Account{})
	if err != nil {
		return Account{}, err
	}
	if a.PUUID == "" {
		return Account{}, &Error{Kind: KindDecode, Op: req.method, Route: req.route, Status: 200, Msg: "account without puuid"}
	}
	return a, nil
}

// MatchIDsQuery holds the optional filters of match-v5 getMatchIdsByPUUID.
// Zero values are omitted from the request.
type MatchIDsQuery struct {
	// Start is the index of the first ID, newest first (≥ 0; Riot keeps
	// about the last 1000 matches).
	Start int
	// Count is the number of IDs, 0..100; 0 omits it (Riot's default, 20).
	Count int
	// StartTime and EndTime are epoch SECONDS (not milliseconds); 0 omits.
	// Setting StartTime excludes matches before 2021-06-16.
	StartTime, EndTime int64
	// Queue filters by queue ID (e.g. 420); nil omits.
	Queue *int
	// Type is "", "ranked", "normal", "tourney" or "tutorial".
	Type string
}

// maxEpochSeconds is 5138-11-16 in epoch seconds: anything above is almost
// certainly epoch milliseconds passed by mistake.
const maxEpochSeconds = 1e11

// Values validates q and returns its query parameters.
func (q MatchIDsQuery) Values() (url.Values, error) {
	v := url.Values{}
	switch {
	case q.Start < 0:
		return nil, fmt.Errorf("start %d < 0", q.Start)
	case q.Count < 0 || q.Count > 100:
		return nil, fmt.Errorf("count %d outside 0..100", q.Count)
	case q.StartTime < 0 || q.EndTime < 0:
		return nil, fmt.Errorf("negative startTime/endTime")
	case q.StartTime > maxEpochSeconds || q.EndTime > maxEpochSeconds:
		return nil, fmt.Errorf("startTime/endTime must be epoch seconds, got %d/%d (milliseconds?)", q.StartTime, q.EndTime)
	case q.StartTime != 0 && q.EndTime != 0 && q.EndTime < q.StartTime:
		return nil, fmt.Errorf("endTime %d before startTime %d", q.EndTime, q.StartTime)
	case q.Queue != nil && *q.Queue < 0:
		return nil, fmt.Errorf("queue %d < 0", *q.Queue)
	}
	switch q.Type {
	case "", "ranked", "normal", "tourney", "tutorial":
	default:
		return nil, fmt.Errorf("type %q: want ranked, normal, tourney or tutorial", q.Type)
	}
	if q.Start != 0 {
		v.Set("start", strconv.Itoa(q.Start))
	}
	if q.Count != 0 {
		v.Set("count", strconv.Itoa(q.Count))
	}
	if q.StartTime != 0 {
		v.Set("startTime", strconv.FormatInt(q.StartTime, 10))
	}
	if q.EndTime != 0 {
		v.Set("endTime", strconv.FormatInt(q.EndTime, 10))
	}
	if q.Queue != nil {
		v.Set("queue", strconv.Itoa(*q.Queue))
	}
	if q.Type != "" {
		v.Set("type", q.Type)
	}
	return v, nil
}

// MatchIDsByPUUID lists a player's match IDs, newest first: match-v5
// getMatchIdsByPUUID, GET /lol/match/v5/matches/by-puuid/{puuid}/ids on
// region. An invalid q is KindBadRequest and sends nothing.
func (c *Client) MatchIDsByPUUID(ctx context.Context, region Region, puuid string, q MatchIDsQuery) ([]string, error) {
	const op = MethodMatchIDsByPUUID
	if err := checkRegion(op, region); err != nil {
		return nil, err
	}
	if err := checkPUUID(op, string(region), puuid); err != nil {
		return nil, err
	}
	vals, verr := q.Values()
	if verr != nil {
		return nil, badRequest(op, string(region), "%v", verr)
	}
	req := request{
		route:    string(region),
		method:   op,
		template: "/lol/match/v5/matches/by-puuid/{puuid}/ids",
		path:     "/lol/match/v5/matches/by-puuid/" + url.PathEscape(puuid) + "/ids",
		query:    vals,
	}
	return getJSON(ctx, c, req, []string{})
}

// Match fetches one match: match-v5 getMatch, GET
// /lol/match/v5/matches/{matchId} on region, which must be the match ID's
// own region (from its prefix; otherwise KindBadRequest, nothing sent). It
// returns the tolerant decoding and the raw JSON body (decompressed). 404
// ("match file not found") is KindNotFound.
func (c *Client) Match(ctx context.Context, region Region, matchID string) (*Match, []byte, error) {
	return fetchDoc(ctx, c, matchDoc, region, matchID, DecodeMatch)
}

// Timeline fetches one match timeline: match-v5 getTimeline, GET
// /lol/match/v5/matches/{matchId}/timeline on the match's region. Riot keeps
// timelines one year (matches two). Returns the decoding and the raw body.
func (c *Client) Timeline(ctx context.Context, region Region, matchID string) (*Timeline, []byte, error) {
	return fetchDoc(ctx, c, timelineDoc, region, matchID, DecodeTimeline)
}

// docEndpoint is a match-v5 document endpoint of one match: its method,
// the path suffix after /lol/match/v5/matches/{matchId}, and the path
// template.
type docEndpoint struct{ op, suffix, tmpl string }

var (
	matchDoc    = docEndpoint{MethodMatch, "", "/lol/match/v5/matches/{matchId}"}
	timelineDoc = docEndpoint{MethodTimeline, "/timeline", "/lol/match/v5/matches/{matchId}/timeline"}
)

// request is the GET of ep for matchID on region, which must be the match
// ID's own region (otherwise KindBadRequest).
func (ep docEndpoint) request(region Region, matchID string) (request, *Error) {
	if err := checkRegion(ep.op, region); err != nil {
		return request{}, err
	}
	_, r, err := ParseMatchID(matchID)
	if err != nil {
		return request{}, badRequest(ep.op, string(region), "%v", err)
	}
	if r != region {
		return request{}, badRequest(ep.op, string(region), "match %s is served by %s, not %s", matchID, r, region)
	}
	return request{
		route:    string(region),
		method:   ep.op,
		template: ep.tmpl,
		path:     "/lol/match/v5/matches/" + url.PathEscape(matchID) + ep.suffix,
	}, nil
}

// fetchDoc is Match and Timeline: GET ep, then decode the body. A body
// that does not decode is KindDecode, returned with the body.
func fetchDoc[T any](ctx context.Context, c *Client, ep docEndpoint, region Region, matchID string, decode func([]byte) (*T, error)) (*T, []byte, error) {
	req, rerr := ep.request(region, matchID)
	if rerr != nil {
		return nil, nil, rerr
	}
	body, err := c.get(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	doc, derr := decode(body)
	if derr != nil {
		return nil, body, &Error{Kind: KindDecode, Op: req.method, Route: req.route, Status: 200, Err: derr}
	}
	return doc, body, nil
}

// LeagueEntriesByPUUID returns a player's ranked entries, one per queue
// played this season (empty if unranked): league-v4
// getLeagueEntriesByPUUID, GET /lol/league/v4/entries/by-puuid/{encryptedPUUID}
// on the player's platform.
func (c *Client) LeagueEntriesByPUUID(ctx context.Context, platform Platform, puuid string) ([]LeagueEntry, error) {
	const op = MethodLeagueEntriesByPUUID
	if platform.Region() == "" {
		return nil, badRequest(op, string(platform), "unknown platform %q", string(platform))
	}
	if err := checkPUUID(op, string(platform), puuid); err != nil {
		return nil, err
	}
	req := request{
		route:    string(platform),
		method:   op,
		template: "/lol/league/v4/entries/by-puuid/{encryptedPUUID}",
		path:     "/lol/league/v4/entries/by-puuid/" + url.PathEscape(puuid),
	}
	return getJSON(ctx, c, req, []LeagueEntry{})
}
