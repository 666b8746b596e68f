package sim

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// patch describes how a served payload differs from the recorded one. The
// JSON is decoded only as deep as needed (json.RawMessage elsewhere), so
// every other field stays intact (key order within patched objects becomes
// sorted; values are unchanged).
type patch struct {
	shift      int64  // ms added to epoch-ms timestamps (when non-zero)
	matchID    string // new metadata.matchId ("" = keep)
	gameID     int64  // new info.gameId (with matchID)
	platformID string // new info.platformId (with matchID)
	slot       int    // participant index to replace (-1 = none)
	puuid      string
	gameName   string
	tagLine    string
	puuids     []string // with matchID: every participant's PUUID, in participantId order (nil = keep)

	// mark renders holes instead of values (see compileTemplate): every
	// shifted time becomes "@@shift:<recorded value>@@", every game ID
	// "@@gameId@@", a synthetic summonerId "@@summonerId@@"; the string
	// fields above then carry their own @@name@@ sentinels.
	mark bool
}

var matchTimeKeys = []string{"gameCreation", "gameStartTimestamp", "gameEndTimestamp"}

// encode marshals v without HTML escaping.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func mustEncode(v any) json.RawMessage {
	b, err := encode(v)
	if err != nil {
		panic(err)
	}
	return b
}

// shifts reports whether epoch-ms times are rewritten at all.
func (p patch) shifts() bool { return p.shift != 0 || p.mark }

// shiftField adds p.shift to obj[key] when it is a non-zero integer.
func (p patch) shiftField(obj map[string]json.RawMessage, key string) {
	raw, ok := obj[key]
	if !ok || !p.shifts() {
		return
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || v == 0 {
		return
	}
	if p.mark {
		obj[key] = json.RawMessage(`"@@shift:` + strconv.FormatInt(v, 10) + `@@"`)
		return
	}
	obj[key] = json.RawMessage(strconv.FormatInt(v+p.shift, 10))
}

// gameIDJSON is info.gameId (and an event's gameId) as served.
func (p patch) gameIDJSON() json.RawMessage {
	if p.mark {
		return json.RawMessage(`"@@gameId@@"`)
	}
	return mustEncode(p.gameID)
}

// summonerID is the summonerId served for the synthetic player.
func (p patch) summonerID() string {
	if p.mark {
		return "@@summonerId@@"
	}
	return "synthetic-" + p.puuid[:24]
}

func decodeObj(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	err := json.Unmarshal(raw, &m)
	return m, err
}

// patchParticipantIDs replaces element slot of a []string of PUUIDs.
func patchPUUIDList(obj map[string]json.RawMessage, slot int, puuid string) error {
	raw, ok := obj["participants"]
	if !ok {
		return nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	if slot < len(list) {
		list[slot] = puuid
	}
	obj["participants"] = mustEncode(list)
	return nil
}

// decodeShifted decodes a MatchDto or TimelineDto one level deep (the top
// object and its info) and shifts info's epoch-ms game times by shift.
func decodeShifted(raw []byte, p patch) (top, info map[string]json.RawMessage, err error) {
	if top, err = decodeObj(raw); err != nil {
		return nil, nil, err
	}
	if info, err = decodeObj(top["info"]); err != nil {
		return nil, nil, err
	}
	for _, k := range matchTimeKeys {
		p.shiftField(info, k)
	}
	return top, info, nil
}

// renamed is top's metadata, decoded, with p's match ID (metadata.matchId);
// info gets p's game ID (info.gameId).
func renamed(top, info map[string]json.RawMessage, p patch) (map[string]json.RawMessage, error) {
	meta, err := decodeObj(top["metadata"])
	if err != nil {
		return nil, err
	}
	meta["matchId"] = mustEncode(p.matchID)
	info["gameId"] = p.gameIDJSON()
	return meta, nil
}

// patchMatch applies p to a MatchDto.
func patchMatch(raw []byte, p patch) ([]byte, error) {
	top, info, err := decodeShifted(raw, p)
	if err != nil {
		return nil, err
	}
	if p.matchID != "" {
		meta, err := renamed(top, info, p)
		if err != nil {
			return nil, err
		}
		info["platformId"] = mustEncode(p.platformID)
		if p.slot >= 0 {
			if err := patchPUUIDList(meta, p.slot, p.puuid); err != nil {
				return nil, err
			}
			var parts []map[string]json.RawMessage
			if err := json.Unmarshal(info["participants"], &parts); err != nil {
				return nil, err
			}
			if p.slot < len(parts) {
				parts[p.slot]["puuid"] = mustEncode(p.puuid)
				parts[p.slot]["riotIdGameName"] = mustEncode(p.gameName)
				parts[p.slot]["riotIdTagline"] = mustEncode(p.tagLine)
				if _, ok := parts[p.slot]["summonerName"]; ok {
					parts[p.slot]["summonerName"] = mustEncode("")
				}
				if _, ok := parts[p.slot]["summonerId"]; ok {
					parts[p.slot]["summonerId"] = mustEncode(p.summonerID())
				}
			}
			info["participants"] = mustEncode(parts)
		}
		top["metadata"] = mustEncode(meta)
	}
	top["info"] = mustEncode(info)
	return encode(top)
}

// patchTimeline applies p to a TimelineDto: realTimestamp of events and any
// epoch-ms game times in info are shifted; frame/event "timestamp" fields
// are milliseconds since game start and stay as they are.
func patchTimeline(raw []byte, p patch) ([]byte, error) {
	top, info, err := decodeShifted(raw, p)
	if err != nil {
		return nil, err
	}
	if p.shifts() {
		var frames []map[string]json.RawMessage
		if err := json.Unmarshal(info["frames"], &frames); err != nil {
			return nil, err
		}
		for _, f := range frames {
			if !bytes.Contains(f["events"], []byte(`"realTimestamp"`)) {
				continue
			}
			var evs []map[string]json.RawMessage
			if err := json.Unmarshal(f["events"], &evs); err != nil {
				return nil, err
			}
			for _, e := range evs {
				p.shiftField(e, "realTimestamp")
				if p.matchID != "" {
					if _, ok := e["gameId"]; ok {
						e["gameId"] = p.gameIDJSON()
					}
				}
			}
			f["events"] = mustEncode(evs)
		}
		info["frames"] = mustEncode(frames)
	}
	if p.matchID != "" {
		meta, err := renamed(top, info, p)
		if err != nil {
			return nil, err
		}
		if _, ok := info["platformId"]; ok {
			info["platformId"] = mustEncode(p.platformID)
		}
		if p.slot >= 0 {
			if err := patchPUUIDList(meta, p.slot, p.puuid); err != nil {
				return nil, err
			}
			var parts []map[string]json.RawMessage
			if err := json.Unmarshal(info["participants"], &parts); err == nil && p.slot < len(parts) {
				parts[p.slot]["puuid"] = mustEncode(p.puuid)
				info["participants"] = mustEncode(parts)
			}
		}
		if p.puuids != nil {
			replaceTimelinePUUIDs(meta, info, p.puuids)
		}
		top["metadata"] = mustEncode(meta)
	}
	top["info"] = mustEncode(info)
	return encode(top)
}

// replaceTimelinePUUIDs sets metadata.participants and
// info.participants[i].puuid of a TimelineDto to puuids (in participantId
// order), as far as both lists go.
func replaceTimelinePUUIDs(meta, info map[string]json.RawMessage, puuids []string) {
	meta["participants"] = mustEncode(puuids)
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(info["participants"], &parts); err != nil {
		return
	}
	for i := range min(len(parts), len(puuids)) {
		parts[i]["puuid"] = mustEncode(puuids[i])
	}
	info["participants"] = mustEncode(parts)
}

// deriveTimeline serves m.tlFrom's recorded timeline as m's (see
// Options.DeriveTimelines): re-keyed to m's match ID, game ID, platform and
// participants, its realTimestamps moved to m's served gameCreation.
func deriveTimeline(m *match) ([]byte, error) {
	var h matchHead
	if err := json.Unmarshal(m.raw, &h); err != nil {
		return nil, err
	}
	from := m.tlFrom
	return patchTimeline(from.tl, patch{
		shift:   m.created - from.origCreated,
		matchID: m.id, gameID: h.Info.GameID, platformID: strings.ToUpper(string(m.platform)),
		slot: -1, puuids: h.Metadata.Participants,
	})
}
