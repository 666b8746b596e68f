package sim

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/riftflow/riftflow/pkg/riot"
)

// shipped is the embedded subset: the 16 NA1 matches of the fixture player
// who appears most often (LugnutsK#000), the one timeline of theirs that
// exists, and the SSG Xayah#NA1 account. Provenance: data/SOURCES.md.
//
//go:embed data/match/*.json.gz data/timeline/*.json.gz data/account/*.json.gz
var shipped embed.FS

// DemoPUUID is the PUUID of the shipped demo player, LugnutsK#000 on NA1,
// who appears in all 16 embedded matches (recorded 2022-01 … 2024-06).
const DemoPUUID = "bJ_-UdX8v1NqvsUemuklcmd70lNjgDY0UN81L75d84HneX8dHy8iteZC49qEkJVPvGzJZC4R-89dHA"

// match is one match of the data set. Real matches keep their recorded
// bytes; synthetic ones point at a real template and are patched per request.
type match struct {
	id          string
	platform    riot.Platform
	region      riot.Region
	raw         []byte // recorded match JSON (nil for synthetic)
	tl          []byte // recorded timeline JSON, nil if none (nil for synthetic)
	origCreated int64  // recorded gameCreation, epoch ms (0 for ghost/aborted games)
	created     int64  // served gameCreation, epoch ms
	queue       int
	tourney     bool
	nPart       int      // len(info.participants)
	puuids      []string // humans: metadata.participants ∪ info.participants minus "BOT"

	// tlFrom is the recorded match whose timeline is served, re-keyed to
	// this match, when this match has no recorded one (Options.DeriveTimelines).
	tlFrom *match

	// synthetic only
	tmpl   *match
	gameID int64
	slot   int
	sp     *player
}

func (m *match) hasTimeline() bool {
	if m.tmpl != nil {
		return m.tmpl.tl != nil || m.tmpl.tlFrom != nil
	}
	return m.tl != nil || m.tlFrom != nil
}

// deriveTimelines gives every real match without a recorded timeline the
// timeline of a recorded match (of its platform when there is one, chosen
// deterministically), served re-keyed to it; see Options.DeriveTimelines.
func (ds *dataset) deriveTimelines() {
	var all []*match
	byPlat := map[riot.Platform][]*match{}
	for _, m := range ds.matches {
		if m.tmpl == nil && m.tl != nil && m.origCreated != 0 {
			all = append(all, m)
			byPlat[m.platform] = append(byPlat[m.platform], m)
		}
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
	for _, l := range byPlat {
		sort.Slice(l, func(i, j int) bool { return l[i].id < l[j].id })
	}
	for _, m := range ds.matches {
		if m.tmpl != nil || m.tl != nil || m.raw == nil || m.origCreated == 0 {
			continue
		}
		from := byPlat[m.platform]
		if len(from) == 0 {
			from = all
		}
		m.tlFrom = from[int(m.origCreated/1000)%len(from)]
	}
}

// player is a PUUID seen in the data.
type player struct {
	Player
	matches   []*match // newest first
	icon      int
	level     int
	nameAt    int64 // gameCreation of the match the Riot ID came from (max for an account fixture)
	seenAt    int64 // gameCreation of the match icon/level/platform came from
	synthetic bool
}

type dataset struct {
	matches  map[string]*match
	players  map[string]*player
	byRiotID map[string]*player // lower-case "name#tag"
	newest   int64              // newest recorded gameCreation of real matches
	tls      map[string][]byte  // timelines awaiting their match
}

// matchHead is the part of a MatchDto the sim indexes.
type matchHead struct {
	Metadata struct {
		MatchID      string   `json:"matchId"`
		Participants []string `json:"participants"`
	} `json:"metadata"`
	Info struct {
		GameCreation   int64  `json:"gameCreation"`
		GameID         int64  `json:"gameId"`
		PlatformID     string `json:"platformId"`
		QueueID        int    `json:"queueId"`
		TournamentCode string `json:"tournamentCode"`
		Participants   []struct {
			PUUID          string `json:"puuid"`
			RiotIDGameName string `json:"riotIdGameName"`
			RiotIDTagline  string `json:"riotIdTagline"`
			ProfileIcon    int    `json:"profileIcon"`
			SummonerLevel  int    `json:"summonerLevel"`
		} `json:"participants"`
	} `json:"info"`
}

func loadData(opts Options) (*dataset, error) {
	ds := &dataset{matches: map[string]*match{}, players: map[string]*player{}, byRiotID: map[string]*player{}, tls: map[string][]byte{}}
	var fsyss []fs.FS
	if !opts.NoEmbedded {
		sub, _ := fs.Sub(shipped, "data")
		fsyss = append(fsyss, sub)
	}
	if opts.FixturesDir != "" {
		if _, err := os.Stat(filepath.Join(opts.FixturesDir, "match")); err != nil {
			return nil, fmt.Errorf("sim: fixtures dir %q: %w", opts.FixturesDir, err)
		}
		fsyss = append(fsyss, os.DirFS(opts.FixturesDir))
	}
	for _, fsys := range fsyss {
		for _, kind := range []string{"match", "timeline", "account"} {
			names, _ := fs.Glob(fsys, kind+"/*.json*")
			for _, name := range names {
				b, err := readMaybeGz(fsys, name)
				if err != nil {
					return nil, fmt.Errorf("sim: %s: %w", name, err)
				}
				if err := ds.add(kind, name, b); err != nil {
					return nil, fmt.Errorf("sim: %s: %w", name, err)
				}
			}
		}
	}
	for id, tl := range ds.tls {
		if m := ds.matches[id]; m != nil {
			m.tl = tl
		}
	}
	ds.tls = nil
	return ds, nil
}

func readMaybeGz(fsys fs.FS, name string) ([]byte, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil || !strings.HasSuffix(name, ".gz") {
		return b, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

func (ds *dataset) add(kind, name string, b []byte) error {
	switch kind {
	case "timeline":
		var h struct {
			Metadata struct {
				MatchID string `json:"matchId"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			return err
		}
		if h.Metadata.MatchID == "" {
			return errors.New("timeline without metadata.matchId")
		}
		ds.tls[h.Metadata.MatchID] = b
	case "account":
		var a struct{ PUUID, GameName, TagLine string }
		if err := json.Unmarshal(b, &a); err != nil {
			return err
		}
		if a.PUUID == "" || a.GameName == "" {
			return nil // e.g. active-shards: not an AccountDto
		}
		p := ds.player(a.PUUID)
		p.GameName, p.TagLine, p.nameAt = a.GameName, a.TagLine, 1<<62
		if p.Platform == "" {
			p.Platform = platformFromTag(a.TagLine)
		}
	case "match":
		var h matchHead
		if err := json.Unmarshal(b, &h); err != nil {
			return err
		}
		id := h.Metadata.MatchID
		if id == "" {
			id = strings.TrimSuffix(strings.TrimSuffix(path.Base(name), ".gz"), ".json")
		}
		plat, reg, err := riot.ParseMatchID(id)
		if err != nil {
			return err
		}
		m := &match{id: id, platform: plat, region: reg, raw: b, origCreated: h.Info.GameCreation,
			created: h.Info.GameCreation, queue: h.Info.QueueID, tourney: h.Info.TournamentCode != "",
			nPart: len(h.Info.Participants), slot: -1}
		if old := ds.matches[id]; old != nil {
			ds.unlink(old)
		}
		ds.matches[id] = m
		if m.origCreated > ds.newest {
			ds.newest = m.origCreated
		}
		seen := map[string]bool{}
		link := func(puuid string) *player {
			if puuid == "" || puuid == "BOT" || seen[puuid] {
				return nil
			}
			seen[puuid] = true
			m.puuids = append(m.puuids, puuid)
			p := ds.player(puuid)
			p.matches = append(p.matches, m)
			return p
		}
		for _, pt := range h.Info.Participants {
			p := link(pt.PUUID)
			if p == nil {
				p = ds.players[pt.PUUID]
			}
			if p == nil {
				continue
			}
			if m.origCreated >= p.seenAt {
				p.icon, p.level, p.Platform, p.seenAt = pt.ProfileIcon, pt.SummonerLevel, string(plat), m.origCreated
			}
			if pt.RiotIDGameName != "" && m.origCreated >= p.nameAt {
				p.GameName, p.TagLine, p.nameAt = pt.RiotIDGameName, pt.RiotIDTagline, m.origCreated
			}
		}
		for _, pu := range h.Metadata.Participants {
			if p := link(pu); p != nil && p.Platform == "" {
				p.Platform = string(plat)
			}
		}
	}
	return nil
}

func (ds *dataset) unlink(m *match) {
	for _, pu := range m.puuids {
		if p := ds.players[pu]; p != nil {
			for i, x := range p.matches {
				if x == m {
					p.matches = append(p.matches[:i], p.matches[i+1:]...)
					break
				}
			}
		}
	}
}

func (ds *dataset) player(puuid string) *player {
	p := ds.players[puuid]
	if p == nil {
		p = &player{Player: Player{PUUID: puuid}, nameAt: -1, seenAt: -1}
		ds.players[puuid] = p
	}
	return p
}

func platformFromTag(tag string) string {
	if p, err := riot.ParsePlatform(tag); err == nil {
		return string(p)
	}
	return ""
}

func (ds *dataset) applyShift(shift int64) {
	for _, m := range ds.matches {
		if m.origCreated != 0 {
			m.created = m.origCreated + shift
		}
	}
}

// finish sorts match lists newest first and indexes Riot IDs.
func (ds *dataset) finish() {
	for _, p := range ds.players {
		sort.SliceStable(p.matches, func(i, j int) bool {
			if p.matches[i].created != p.matches[j].created {
				return p.matches[i].created > p.matches[j].created
			}
			return p.matches[i].id > p.matches[j].id
		})
		p.Matches = len(p.matches)
		if p.GameName != "" {
			ds.byRiotID[riotKey(p.GameName, p.TagLine)] = p
		}
	}
}

func riotKey(name, tag string) string {
	return riot.RiotID{GameName: name, TagLine: tag}.Key()
}

// Player is a player known to the sim: every PUUID in the loaded matches
// (bots excluded), the account fixtures and the synthetic players.
type Player struct {
	PUUID    string `json:"puuid"`
	GameName string `json:"gameName,omitempty"` // "" when no match recorded a Riot ID
	TagLine  string `json:"tagLine,omitempty"`
	Platform string `json:"platform,omitempty"` // lower case, e.g. "na1"; from the newest match
	Matches  int    `json:"matches"`            // matches in the data (the matchlist may cap at 1000)
}

// Players returns every player, most matches first, then by PUUID.
func (s *Sim) Players() []Player {
	out := make([]Player, 0, len(s.data.players))
	for _, p := range s.data.players {
		out = append(out, p.Player)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Matches != out[j].Matches {
			return out[i].Matches > out[j].Matches
		}
		return out[i].PUUID < out[j].PUUID
	})
	return out
}

// DemoPlayer returns the shipped demo player (LugnutsK#000, NA1, 16 real
// matches of which the newest are retrievable after re-dating). ok is false
// when the embedded data was not loaded.
func (s *Sim) DemoPlayer() (p Player, ok bool) {
	if pl := s.data.players[DemoPUUID]; pl != nil {
		return pl.Player, true
	}
	return Player{}, false
}

// FindFixtures returns the recorded Riot responses folder: $RIFTFLOW_FIXTURES
// if set, else the repository's testdata/riot-fixtures found from the
// current directory or one of its parents (so tests in any module and
// `make run` from the repository root find it), else "" (the simulator then
// serves its small embedded set).
func FindFixtures() string {
	if d := os.Getenv("RIFTFLOW_FIXTURES"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		c := filepath.Join(dir, "testdata", "riot-fixtures")
		if st, err := os.Stat(filepath.Join(c, "match")); err == nil && st.IsDir() {
			return filepath.Clean(c)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
