package riot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Int is a tolerant integer for Riot payloads. It decodes a JSON integer, a
// float with an integral value or not (12.0 → 12, 12.7 → 12: truncated), a
// numeric string ("12") and null (→ 0). An absent field stays 0, which the
// Riot docs say is the meaning of a missing number ("Any numeric field that
// isn't returned can be assumed to be 0", developer portal). Values outside
// the int64 range, NaN, booleans, objects and arrays are errors.
type Int int64

// UnmarshalJSON implements json.Unmarshaler.
func (n *Int) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		*n = 0
		return nil
	}
	s := string(b)
	if b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return fmt.Errorf("riot.Int: %w", err)
		}
		s = strings.TrimSpace(str)
		if s == "" {
			*n = 0
			return nil
		}
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = Int(v)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("riot.Int: %.32q is not a number", s)
	}
	// float64(math.MaxInt64) rounds up to 2^63, which does not fit.
	if math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return fmt.Errorf("riot.Int: %.32q out of int64 range", s)
	}
	*n = Int(int64(f))
	return nil
}

// Account is account-v1 AccountDto (getByRiotId, getByPuuid). PUUID is 78
// characters and specific to the API key's application; GameName and TagLine
// are absent for some accounts (then "").
type Account struct {
	PUUID    string `json:"puuid"`
	GameName string `json:"gameName"`
	TagLine  string `json:"tagLine"`
}

// AccountRegion is account-v1 AccountRegionDTO (getActiveRegion): Region
// is the player's active platform routing value for Game ("lol", "tft"),
// e.g. "na1".
type AccountRegion struct {
	PUUID  string `json:"puuid"`
	Game   string `json:"game"`
	Region string `json:"region"`
}

// RiotID returns the account's Riot ID (empty parts if Riot sent none).
func (a Account) RiotID() RiotID { return RiotID{GameName: a.GameName, TagLine: a.TagLine} }

// LeagueEntry is league-v4 LeagueEntryDTO in its by-puuid shape (2025+):
// one entry per ranked queue the player has played this season. Legacy
// fields (summonerId, summonerName) are ignored.
//
// Source: openapi league-v4.LeagueEntryDTO.
type LeagueEntry struct {
	LeagueID     string      `json:"leagueId"`
	PUUID        string      `json:"puuid"`
	QueueType    string      `json:"queueType"` // RANKED_SOLO_5x5, RANKED_FLEX_SR, ...
	Tier         string      `json:"tier"`      // IRON ... CHALLENGER
	Rank         string      `json:"rank"`      // I, II, III, IV
	LeaguePoints Int         `json:"leaguePoints"`
	Wins         Int         `json:"wins"`
	Losses       Int         `json:"losses"`
	HotStreak    bool        `json:"hotStreak"`
	Veteran      bool        `json:"veteran"`
	FreshBlood   bool        `json:"freshBlood"`
	Inactive     bool        `json:"inactive"`
	MiniSeries   *MiniSeries `json:"miniSeries,omitempty"`
}

// MiniSeries is a promotion series (absent outside one).
type MiniSeries struct {
	Losses   Int    `json:"losses"`
	Progress string `json:"progress"` // e.g. "WLN"
	Target   Int    `json:"target"`
	Wins     Int    `json:"wins"`
}

// Match is match-v5 MatchDto (getMatch), reduced to what the normalizer
// needs. Unknown fields are ignored; keep the raw body for everything else.
type Match struct {
	Metadata Metadata  `json:"metadata"`
	Info     MatchInfo `json:"info"`
}

// Metadata is match-v5 MetadataDto, shared by matches and timelines.
// Participants lists PUUIDs in participant order; in Co-op vs AI games only
// the humans appear, and in aborted games it may list players while
// Info.Participants is empty.
type Metadata struct {
	DataVersion  string   `json:"dataVersion"`
	MatchID      string   `json:"matchId"`
	Participants []string `json:"participants"`
}

// MatchInfo is match-v5 InfoDto.
type MatchInfo struct {
	GameCreation Int `json:"gameCreation"` // epoch ms, game created (loading screen)
	// GameDuration is in seconds when GameEndTimestamp is present (patch
	// 11.20+), in milliseconds before; use DurationSeconds.
	GameDuration       Int    `json:"gameDuration"`
	GameStartTimestamp Int    `json:"gameStartTimestamp"` // epoch ms
	GameEndTimestamp   Int    `json:"gameEndTimestamp"`   // epoch ms; 0 if absent (before 11.20)
	GameID             Int    `json:"gameId"`             // 0 in aborted games
	GameMode           string `json:"gameMode"`           // CLASSIC, ARAM, CHERRY (Arena), STRAWBERRY (Swarm), ...
	GameName           string `json:"gameName"`
	GameType           string `json:"gameType"`    // MATCHED_GAME, ...
	GameVersion        string `json:"gameVersion"` // e.g. "16.4.748.682"
	MapID              Int    `json:"mapId"`
	PlatformID         string `json:"platformId"` // e.g. "EUW1"; "" in aborted games
	QueueID            Int    `json:"queueId"`    // 0 for tournament-code and aborted games
	// EndOfGameResult is "GameComplete", "Abort_Unexpected", ...; "" before 14.x.
	EndOfGameResult string        `json:"endOfGameResult"`
	TournamentCode  string        `json:"tournamentCode"`
	Participants    []Participant `json:"participants"`
	Teams           []Team        `json:"teams"`
}

// DurationSeconds returns the game's length in seconds following Riot's rule
// for gameDuration: "treat the value as milliseconds if the gameEndTimestamp
// field isn't in the response and … seconds if gameEndTimestamp is in the
// response" (openapi match-v5.InfoDto). A zero GameEndTimestamp counts as absent.
func (i *MatchInfo) DurationSeconds() int64 {
	if i.GameEndTimestamp != 0 {
		return int64(i.GameDuration)
	}
	return int64(i.GameDuration) / 1000
}

// Patch returns the first two parts of GameVersion ("16.4.748.682" → "16.4"),
// which Riot documents as the patch, or "" if GameVersion has fewer than two.
func (i *MatchInfo) Patch() string {
	major, rest, ok := strings.Cut(i.GameVersion, ".")
	if !ok || major == "" {
		return ""
	}
	minor, _, _ := strings.Cut(rest, ".")
	if minor == "" {
		return ""
	}
	return major + "." + minor
}

// BotPUUID is the puuid Riot gives bot participants (Co-op vs AI).
const BotPUUID = "BOT"

// Participant is match-v5 ParticipantDto, reduced. TeamID is 100 or 200;
// Arena games (queues 1700/1710) group players with PlayerSubteamID (1..8)
// and rank them with Placement / SubteamPlacement (0 when Riot omitted the
// arena fields, as in some 2023 games).
type Participant struct {
	ParticipantID               Int    `json:"participantId"` // 1..N
	PUUID                       string `json:"puuid"`         // BotPUUID for bots
	RiotIDGameName              string `json:"riotIdGameName"`
	RiotIDTagline               string `json:"riotIdTagline"`
	TeamID                      Int    `json:"teamId"`
	ChampionID                  Int    `json:"championId"`
	ChampionName                string `json:"championName"`
	ChampLevel                  Int    `json:"champLevel"`
	TeamPosition                string `json:"teamPosition"` // TOP, JUNGLE, MIDDLE, BOTTOM, UTILITY or ""
	IndividualPosition          string `json:"individualPosition"`
	Role                        string `json:"role"`
	Lane                        string `json:"lane"`
	Win                         bool   `json:"win"`
	Kills                       Int    `json:"kills"`
	Deaths                      Int    `json:"deaths"`
	Assists                     Int    `json:"assists"`
	GoldEarned                  Int    `json:"goldEarned"`
	TotalMinionsKilled          Int    `json:"totalMinionsKilled"`
	NeutralMinionsKilled        Int    `json:"neutralMinionsKilled"`
	VisionScore                 Int    `json:"visionScore"`
	TotalDamageDealtToChampions Int    `json:"totalDamageDealtToChampions"`
	TotalDamageTaken            Int    `json:"totalDamageTaken"`
	DamageDealtToObjectives     Int    `json:"damageDealtToObjectives"`
	GoldSpent                   Int    `json:"goldSpent"`
	WardsPlaced                 Int    `json:"wardsPlaced"`
	WardsKilled                 Int    `json:"wardsKilled"`
	TimePlayed                  Int    `json:"timePlayed"` // seconds
	Placement                   Int    `json:"placement"`
	PlayerSubteamID             Int    `json:"playerSubteamId"`
	SubteamPlacement            Int    `json:"subteamPlacement"`
	Item0                       Int    `json:"item0"`
	Item1                       Int    `json:"item1"`
	Item2                       Int    `json:"item2"`
	Item3                       Int    `json:"item3"`
	Item4                       Int    `json:"item4"`
	Item5                       Int    `json:"item5"`
	Item6                       Int    `json:"item6"`
	Summoner1ID                 Int    `json:"summoner1Id"`
	Summoner2ID                 Int    `json:"summoner2Id"`
	GameEndedInSurrender        bool   `json:"gameEndedInSurrender"`
	GameEndedInEarlySurrender   bool   `json:"gameEndedInEarlySurrender"`
}

// Items returns item0..item6 in slot order.
func (p *Participant) Items() [7]Int {
	return [7]Int{p.Item0, p.Item1, p.Item2, p.Item3, p.Item4, p.Item5, p.Item6}
}

// IsBot reports whether the participant is a bot (puuid "BOT").
func (p *Participant) IsBot() bool { return p.PUUID == BotPUUID }

// Team is match-v5 TeamDto.
type Team struct {
	TeamID Int   `json:"teamId"`
	Win    bool  `json:"win"`
	Bans   []Ban `json:"bans"`
	// Objectives is keyed by objective name: atakhan, baron, champion,
	// dragon, horde, inhibitor, riftHerald, tower (new ones appear as added).
	Objectives map[string]Objective `json:"objectives"`
}

// Ban is match-v5 BanDto. ChampionID is -1 for "no ban".
type Ban struct {
	ChampionID Int `json:"championId"`
	PickTurn   Int `json:"pickTurn"`
}

// Objective is match-v5 ObjectiveDto.
type Objective struct {
	First bool `json:"first"`
	Kills Int  `json:"kills"`
}

// Timeline is match-v5 TimelineDto (getTimeline), reduced.
type Timeline struct {
	Metadata Metadata     `json:"metadata"`
	Info     TimelineInfo `json:"info"`
}

// TimelineInfo is match-v5 InfoTimeLineDto.
type TimelineInfo struct {
	FrameInterval   Int                   `json:"frameInterval"` // ms, normally 60000
	Frames          []Frame               `json:"frames"`
	GameID          Int                   `json:"gameId"`
	Participants    []TimelineParticipant `json:"participants"`
	EndOfGameResult string                `json:"endOfGameResult"`
}

// TimelineParticipant maps a participant ID to a PUUID.
type TimelineParticipant struct {
	ParticipantID Int    `json:"participantId"`
	PUUID         string `json:"puuid"`
}

// Frame is match-v5 FramesTimeLineDto: a snapshot every FrameInterval.
type Frame struct {
	Timestamp Int `json:"timestamp"` // ms since game start
	// ParticipantFrames is keyed by participant ID as a string, "1".."N".
	ParticipantFrames map[string]ParticipantFrame `json:"participantFrames"`
	Events            []Event                     `json:"events"`
}

// ParticipantFrame is match-v5 ParticipantFrameDto, reduced.
type ParticipantFrame struct {
	ParticipantID            Int         `json:"participantId"`
	CurrentGold              Int         `json:"currentGold"`
	TotalGold                Int         `json:"totalGold"`
	GoldPerSecond            Int         `json:"goldPerSecond"`
	XP                       Int         `json:"xp"`
	Level                    Int         `json:"level"`
	MinionsKilled            Int         `json:"minionsKilled"`
	JungleMinionsKilled      Int         `json:"jungleMinionsKilled"`
	TimeEnemySpentControlled Int         `json:"timeEnemySpentControlled"` // ms
	Position                 Position    `json:"position"`
	DamageStats              DamageStats `json:"damageStats"`
}

// DamageStats is the part of match-v5 DamageStatsDto a normalizer uses.
type DamageStats struct {
	TotalDamageDoneToChampions Int `json:"totalDamageDoneToChampions"`
	TotalDamageTaken           Int `json:"totalDamageTaken"`
}

// Position is a map position in game units.
type Position struct {
	X Int `json:"x"`
	Y Int `json:"y"`
}

// Event is match-v5 EventsTimeLineDto, reduced to the commonly used fields
// (Riot defines ~40, all optional except timestamp and type).
type Event struct {
	Timestamp               Int       `json:"timestamp"`     // ms since game start
	RealTimestamp           Int       `json:"realTimestamp"` // epoch ms (GAME_END, PAUSE_*)
	Type                    string    `json:"type"`          // CHAMPION_KILL, ITEM_PURCHASED, ...
	ParticipantID           Int       `json:"participantId"`
	KillerID                Int       `json:"killerId"`
	VictimID                Int       `json:"victimId"`
	AssistingParticipantIDs []Int     `json:"assistingParticipantIds"`
	CreatorID               Int       `json:"creatorId"`
	ItemID                  Int       `json:"itemId"`
	SkillSlot               Int       `json:"skillSlot"`
	Level                   Int       `json:"level"`
	TeamID                  Int       `json:"teamId"`
	KillerTeamID            Int       `json:"killerTeamId"`
	WinningTeam             Int       `json:"winningTeam"`
	Bounty                  Int       `json:"bounty"`
	ShutdownBounty          Int       `json:"shutdownBounty"`
	KillStreakLength        Int       `json:"killStreakLength"`
	MultiKillLength         Int       `json:"multiKillLength"`
	KillType                string    `json:"killType"`
	MonsterType             string    `json:"monsterType"`
	MonsterSubType          string    `json:"monsterSubType"`
	BuildingType            string    `json:"buildingType"`
	LaneType                string    `json:"laneType"`
	TowerType               string    `json:"towerType"`
	WardType                string    `json:"wardType"`
	Position                *Position `json:"position,omitempty"`
}

// errNoMatchID is returned by the decoders when the body decodes but is not a
// match or timeline (e.g. "{}" or "null").
var errNoMatchID = errors.New("metadata.matchId missing")

// DecodeMatch decodes a match-v5 getMatch body tolerantly (see Int). It
// fails on malformed JSON, on a document past the JSON bounds
// (ErrJSONBounds, checked before decoding), on a number that does not fit
// Int, and on a body without metadata.matchId.
func DecodeMatch(data []byte) (*Match, error) {
	return decodeDoc(data, "match", func(m *Match) string { return m.Metadata.MatchID })
}

// DecodeTimeline decodes a match-v5 getTimeline body tolerantly (see Int),
// with the same failure rules as DecodeMatch.
func DecodeTimeline(data []byte) (*Timeline, error) {
	return decodeDoc(data, "timeline", func(t *Timeline) string { return t.Metadata.MatchID })
}

// decodeDoc is DecodeMatch and DecodeTimeline: what names the document in
// errors ("decode match: ..."), matchID reads its metadata.matchId.
func decodeDoc[T any](data []byte, what string, matchID func(*T) string) (*T, error) {
	if err := checkShape(data); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	var doc T
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	if matchID(&doc) == "" {
		return nil, fmt.Errorf("decode %s: %w", what, errNoMatchID)
	}
	return &doc, nil
}

// Bounds on a Riot JSON document, checked by DecodeMatch and DecodeTimeline
// before any allocation. The largest recorded documents (a 1.7 MB
// TimelineDto) have nesting depth 9, about 4,000 objects and arrays and
// 31,000 elements; the bounds leave 3–25× room. They keep a small crafted
// body (a 4 KiB gzip of millions of empty objects) from taking gigabytes
// of heap in the decoder.
const (
	MaxJSONDepth      = 32
	MaxJSONContainers = 100_000   // objects and arrays
	MaxJSONElements   = 1_000_000 // array elements and object members
)

// ErrJSONBounds is returned (wrapped) for a document past the bounds above.
var ErrJSONBounds = errors.New("JSON document exceeds riftflow's bounds")

// checkShape scans data once, outside strings, and fails with ErrJSONBounds
// when its nesting depth, object/array count or element count (commas,
// plus one per non-empty container) is past the bounds.
func checkShape(data []byte) error {
	var s DocScan
	_, err := s.Write(data)
	return err
}
