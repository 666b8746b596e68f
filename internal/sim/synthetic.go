package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// Synthetic configures a synthetic backlog for load tests. Every synthetic
// match is a CLONE OF A REAL RECORDED PAYLOAD (a template chosen
// deterministically among the loaded real matches of Platform, or of any
// platform when there are none) served under a new match ID, with
// metadata.matchId, info.gameId, info.platformId and the timestamps patched
// consistently, and participant slot 0 replaced by the synthetic player.
// Its timeline, when the template has one, is patched the same way.
// Only a small index entry is kept per match; payloads are rendered from
// the template on each request (a template is compiled once into literal
// runs and holes, its runs pre-compressed, see compiledTemplate), so
// 20,000+ matches cost little memory and little CPU.
type Synthetic struct {
	// Players is the number of synthetic players ("Synth0001#SYN", ...).
	Players int `json:"players"`
	// MatchesPerPlayer is the number of matches per player.
	MatchesPerPlayer int `json:"matchesPerPlayer"`
	// Platform of the players and match IDs, e.g. "na1" (default na1).
	Platform string `json:"platform"`
	// WithTimelines clones only recorded matches that have a recorded
	// timeline, so every synthetic match has one (throughput benchmarks
	// of match + timeline pairs).
	WithTimelines bool `json:"withTimelines,omitempty"`
	// Spacing between a player's matches (default 3h). The newest match of
	// player i was created 1h + i×1min before Now() at New.
	Spacing time.Duration `json:"spacing"`
}

// SyntheticGameIDBase is added to synthetic game IDs so they never collide
// with recorded ones: match j of player i (0-based) is
// PLATFORM_(SyntheticGameIDBase + i×MatchesPerPlayer + j).
const SyntheticGameIDBase = 9_000_000_000

// SyntheticPUUID returns the deterministic 78-character PUUID of synthetic
// player i (1-based).
func SyntheticPUUID(platform string, i int) string {
	s := fmt.Sprintf("synth-%s-%06d-", strings.ToLower(platform), i)
	return s + strings.Repeat("x", 78-len(s))
}

// SyntheticRiotID returns the Riot ID of synthetic player i (1-based),
// "Synth0001#SYN".
func SyntheticRiotID(i int) riot.RiotID {
	return riot.RiotID{GameName: fmt.Sprintf("Synth%04d", i), TagLine: "SYN"}
}

func (ds *dataset) addSynthetic(cfg Synthetic, now time.Time) error {
	if cfg.MatchesPerPlayer <= 0 {
		return errors.New("sim: Synthetic.MatchesPerPlayer must be > 0")
	}
	if cfg.Platform == "" {
		cfg.Platform = "na1"
	}
	plat, err := riot.ParsePlatform(cfg.Platform)
	if err != nil {
		return fmt.Errorf("sim: synthetic: %w", err)
	}
	if cfg.Spacing <= 0 {
		cfg.Spacing = 3 * time.Hour
	}
	var tmpls, any []*match
	for _, m := range ds.matches {
		if m.raw == nil || m.nPart == 0 || m.origCreated == 0 || (cfg.WithTimelines && m.tl == nil) {
			continue
		}
		any = append(any, m)
		if m.platform == plat {
			tmpls = append(tmpls, m)
		}
	}
	if len(tmpls) == 0 {
		tmpls = any
	}
	if len(tmpls) == 0 {
		return errors.New("sim: synthetic backlog needs at least one real match to clone")
	}
	sort.Slice(tmpls, func(i, j int) bool { return tmpls[i].id < tmpls[j].id })
	prefix := strings.ToUpper(string(plat))
	base := now.Add(-time.Hour).UnixMilli()
	for i := 1; i <= cfg.Players; i++ {
		rid := SyntheticRiotID(i)
		p := ds.player(SyntheticPUUID(string(plat), i))
		p.GameName, p.TagLine, p.Platform, p.synthetic = rid.GameName, rid.TagLine, string(plat), true
		p.icon, p.level = 29, 30+i%500
		for j := 0; j < cfg.MatchesPerPlayer; j++ {
			t := tmpls[(i*7+j)%len(tmpls)]
			gid := int64(SyntheticGameIDBase + (i-1)*cfg.MatchesPerPlayer + j)
			m := &match{
				id: fmt.Sprintf("%s_%d", prefix, gid), platform: plat, region: plat.Region(),
				origCreated: t.origCreated,
				created:     base - int64(i-1)*time.Minute.Milliseconds() - int64(j)*cfg.Spacing.Milliseconds(),
				queue:       t.queue, tourney: t.tourney, nPart: t.nPart, puuids: []string{p.PUUID},
				tmpl: t, gameID: gid, slot: 0, sp: p,
			}
			ds.matches[m.id] = m
			p.matches = append(p.matches, m)
		}
	}
	return nil
}

// synthPatch is the patch turning a synthetic match's template into it.
func (m *match) synthPatch() patch {
	return patch{
		shift:   m.created - m.tmpl.origCreated,
		matchID: m.id, gameID: m.gameID, platformID: strings.ToUpper(string(m.platform)),
		slot: m.slot, puuid: m.sp.PUUID, gameName: m.sp.GameName, tagLine: m.sp.TagLine,
	}
}

// synthSource is what synthetic match m's payload is patched from (its
// template's MatchDto, or with timeline its TimelineDto) and the patch.
// A template's timeline is its recorded one, or with
// Options.DeriveTimelines the one derived for the template (another
// recorded match's, re-keyed to m, its participants the template's with
// m's player in its slot).
func synthSource(m *match, timeline bool) ([]byte, patch, error) {
	p := m.synthPatch()
	if !timeline {
		return m.tmpl.raw, p, nil
	}
	if m.tmpl.tl != nil || m.tmpl.tlFrom == nil {
		return m.tmpl.tl, p, nil
	}
	var h matchHead
	if err := json.Unmarshal(m.tmpl.raw, &h); err != nil {
		return nil, patch{}, err
	}
	puuids := slices.Clone(h.Metadata.Participants)
	if m.slot < len(puuids) {
		puuids[m.slot] = m.sp.PUUID
	}
	from := m.tmpl.tlFrom
	p.shift, p.slot, p.puuids = m.created-from.origCreated, -1, puuids
	return from.tl, p, nil
}
