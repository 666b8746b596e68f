package riot

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Platform is a platform routing value, the host of the platform-scoped
// endpoints (league-v4, summoner-v4): "na1", "euw1", "kr", ... Always lower case.
//
// Source: riotapi-schema routesTable.json (testdata/riot-fixtures/openapi/routesTable.json
// in this repository; https://github.com/MingweiSamuel/riotapi-schema).
type Platform string

// Region is a regional routing value, the host of the regional endpoints
// (account-v1, match-v5): "americas", "asia", "europe" or "sea".
type Region string

// Regional routing values.
const (
	Americas Region = "americas"
	Asia     Region = "asia"
	Europe   Region = "europe"
	SEA      Region = "sea"
)

// platformRegion maps every LoL platform to its match-v5 regional route.
// ph2 and th2 were merged into sg2 on 2025-01-08, but their match IDs keep
// the PH2_/TH2_ prefixes, so they stay in the table.
var platformRegion = map[Platform]Region{
	"na1": Americas, "br1": Americas, "la1": Americas, "la2": Americas, "pbe1": Americas,
	"kr": Asia, "jp1": Asia,
	"euw1": Europe, "eun1": Europe, "tr1": Europe, "ru": Europe, "me1": Europe,
	"oc1": SEA, "sg2": SEA, "tw2": SEA, "vn2": SEA, "ph2": SEA, "th2": SEA,
}

// Platforms returns every known platform, for help texts and validation errors.
func Platforms() []Platform {
	out := make([]Platform, 0, len(platformRegion))
	for p := range platformRegion {
		out = append(out, p)
	}
	return out
}

// ParsePlatform normalises s ("NA1", " jp1 ") to a known Platform, or
// returns an error naming the value.
func ParsePlatform(s string) (Platform, error) {
	p := Platform(strings.ToLower(strings.TrimSpace(s)))
	if _, ok := platformRegion[p]; !ok {
		if len(s) > 16 {
			s = s[:16] + "…"
		}
		return "", fmt.Errorf("unknown platform %q (want one of na1, euw1, eun1, kr, jp1, br1, la1, la2, oc1, tr1, ru, me1, sg2, tw2, vn2, ph2, th2)", s)
	}
	return p, nil
}

// Region returns the match-v5 regional route of the platform ("" if unknown).
func (p Platform) Region() Region { return platformRegion[p] }

// AccountRegion returns the routing value for account-v1, which serves only
// americas, asia and europe; any cluster can answer for any account, so sea
// players are looked up on the nearest one, asia.
func (p Platform) AccountRegion() Region {
	r := platformRegion[p]
	if r == SEA {
		return Asia
	}
	return r
}

// Valid reports whether r is one of the four regional routing values.
func (r Region) Valid() bool {
	switch r {
	case Americas, Asia, Europe, SEA:
		return true
	}
	return false
}

// ParseMatchID splits a match ID "{PLATFORMID}_{gameId}" (e.g. "NA1_4223689858")
// into its platform and regional route. The region comes from the ID's prefix,
// never from the player's current platform.
func ParseMatchID(id string) (Platform, Region, error) {
	if len(id) > 32 {
		return "", "", fmt.Errorf("match ID too long (%d bytes, max 32)", len(id))
	}
	prefix, num, ok := strings.Cut(id, "_")
	if !ok || prefix == "" || num == "" {
		return "", "", fmt.Errorf("match ID %q is not of the form PLATFORM_gameId", id)
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return "", "", fmt.Errorf("match ID %q: game ID must be digits", id)
		}
	}
	p := Platform(strings.ToLower(prefix))
	r, known := platformRegion[p]
	if !known {
		return "", "", fmt.Errorf("match ID %q: unknown platform prefix %q", id, prefix)
	}
	return p, r, nil
}

// RiotID is a player's Riot ID, gameName#tagLine.
type RiotID struct {
	GameName string
	TagLine  string
}

// String returns "gameName#tagLine".
func (id RiotID) String() string { return id.GameName + "#" + id.TagLine }

// Key returns the normalised form used as a cache key: lower-cased (Riot IDs
// are case-insensitive) with surrounding spaces removed.
func (id RiotID) Key() string {
	return strings.ToLower(strings.TrimSpace(id.GameName)) + "#" + strings.ToLower(strings.TrimSpace(id.TagLine))
}

// Limits on Riot ID parts: Riot allows a game name of 3–16 characters and a
// tag line of 3–5; older migrated names can be shorter, so only the upper
// bounds and the character classes are enforced.
const (
	MaxGameNameRunes = 16
	MaxTagLineRunes  = 5
)

// ParseRiotID parses "gameName#tagLine". It rejects a missing '#', empty
// parts, over-long parts, control characters and a tag line that is not
// letters and digits.
func ParseRiotID(s string) (RiotID, error) {
	if !utf8.ValidString(s) {
		return RiotID{}, fmt.Errorf("riot ID is not valid UTF-8")
	}
	if len(s) > 4*(MaxGameNameRunes+MaxTagLineRunes)+1 {
		return RiotID{}, fmt.Errorf("riot ID too long (%d bytes)", len(s))
	}
	i := strings.LastIndexByte(s, '#')
	if i < 0 {
		return RiotID{}, fmt.Errorf("riot ID %q has no '#': want gameName#tagLine", s)
	}
	name, tag := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
	switch {
	case name == "":
		return RiotID{}, fmt.Errorf("riot ID %q: empty game name", s)
	case tag == "":
		return RiotID{}, fmt.Errorf("riot ID %q: empty tag line", s)
	case utf8.RuneCountInString(name) > MaxGameNameRunes:
		return RiotID{}, fmt.Errorf("riot ID: game name longer than %d characters", MaxGameNameRunes)
	case utf8.RuneCountInString(tag) > MaxTagLineRunes:
		return RiotID{}, fmt.Errorf("riot ID: tag line longer than %d characters", MaxTagLineRunes)
	}
	for _, c := range name {
		if unicode.IsControl(c) || c == '#' || c == '/' {
			return RiotID{}, fmt.Errorf("riot ID: game name has a forbidden character %q", c)
		}
	}
	for _, c := range tag {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return RiotID{}, fmt.Errorf("riot ID: tag line must be letters and digits, got %q", c)
		}
	}
	return RiotID{GameName: name, TagLine: tag}, nil
}
