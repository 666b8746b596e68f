package bus

import "fmt"

// Nats-Msg-Ids. A JetStream stream drops a message whose Nats-Msg-Id it
// already holds inside its duplicate window, so each id below names what
// must be published once: the same id for a repeat of the same work, a new
// one for new work.

// FetchMsgID is the id of a fetch command published by the lister, by the
// fetcher (a timeline after its match) and by `riftflow retry`: the match
// ID, "/timeline" for a timeline, then c.DedupSuffix().
func FetchMsgID(c FetchCommand) string {
	id := c.MatchID
	if c.Kind == KindTimeline {
		id += "/timeline"
	}
	return id + c.DedupSuffix()
}

// SweepFetchMsgID is the id of the retry-sweeper's re-publish of c:
// "<match>/<kind>/sweep/a<attempt>", so replicas and repeated sweeps of
// the same due row publish once.
func SweepFetchMsgID(c FetchCommand) string {
	return fmt.Sprintf("%s/%s/sweep/a%d", c.MatchID, c.Kind, c.Attempt)
}

// FetchResultMsgID is the id of the result o of attempt c:
// "<match>/<kind>/a<attempt>/<outcome>", then c.DedupSuffix(), then
// "/<delivery>" when delivery (the delivered command's stream sequence,
// "s<seq>") is not "".
func FetchResultMsgID(c FetchCommand, o Outcome, delivery string) string {
	id := fmt.Sprintf("%s/%s/a%d/%s", c.MatchID, c.Kind, c.Attempt, o) + c.DedupSuffix()
	if delivery != "" {
		id += "/" + delivery
	}
	return id
}

// FetchWaitMsgID is the id of the schedule that makes attempt c wait (a
// rate-limit or key wait) from delivery delivery ("s<seq>"):
// "wait/<match>/<kind>/a<attempt>/<delivery>"; "" without a delivery (no
// deduplication).
func FetchWaitMsgID(c FetchCommand, delivery string) string {
	if delivery == "" {
		return ""
	}
	return fmt.Sprintf("wait/%s/%s/a%d/%s", c.MatchID, c.Kind, c.Attempt, delivery)
}

// FetchRetryToken is the last token of c's schedule subject (FetchRetry):
// "<match>_<kind>_a<attempt>_<hold>", one per schedule.
func FetchRetryToken(c FetchCommand) string {
	return fmt.Sprintf("%s_%s_a%d_%s", c.MatchID, c.Kind, c.Attempt, c.Hold)
}

// IngestMsgID is the id of the IngestRequest requestID: "ingest:<id>".
func IngestMsgID(requestID string) string { return "ingest:" + requestID }

// SyncMsgID is the id of the SyncCommand of requestID: "sync:<id>".
func SyncMsgID(requestID string) string { return "sync:" + requestID }

// EndedRequestMsgID is the id of the Rejection of the request stored at
// sequence seq of stream that the retry-sweeper ended (how: "expired" for
// one that waited too long, or the advisory's reason):
// "<how>:<stream>:<seq>".
func EndedRequestMsgID(how, stream string, seq uint64) string {
	return fmt.Sprintf("%s:%s:%d", how, stream, seq)
}

// WeeklyReportMsgID is the id of the weekly report of the account whose
// PUUID hashes to puuidHash for the week starting weekStart:
// "weekly:<hash>:<week start>".
func WeeklyReportMsgID(puuidHash, weekStart string) string {
	return "weekly:" + puuidHash + ":" + weekStart
}
