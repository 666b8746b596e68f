// Package ratelimit implements riot.Limiter for the Riot Games API: per
// process (NewLocal) and shared by every process that uses one API key
// (NewShared, state in a NATS JetStream KV bucket).
//
// Both keep one application budget per (key, route) and one method budget
// per (key, route, method). Each budget is a set of fixed windows
// ("500:10,30000:600": 500 requests per 10 s and 30,000 per 600 s) that
// start with the first request, as Riot's do. Limits are never hard-coded:
// they are learned from X-App-Rate-Limit and X-Method-Rate-Limit on every
// response, and counts are reconciled with the -Count headers. Until the
// first response on a budget, at most Options.InitialInFlight requests are
// in flight on it.
//
// A request is reserved in every window of both budgets before it is sent
// (Acquire) and reconciled when Riot answers (Permit.Done). A 429 pauses the
// scope named by X-Rate-Limit-Type: the whole route for "application", the
// method for "method", and the method with exponential backoff for
// "service", "server" or no type. Interactive calls (riot.Call.Background
// false) are served before background ones. Acquire never waits past ctx's
// deadline or Options.MaxWait: it returns a *riot.Error of
// riot.KindRateLimited with RetryAt instead, without reserving.
//
// Windows are held open past their nominal end by a margin measured from
// round trips, never a constant. A count-1 reply realigns a window to Riot's
// without giving up budget (engine.alignToRiot). Shared judges windows on
// the NATS server's clock, so host clock skew moves nothing, and fails
// closed when the KV bucket is unreachable: it grants only tokens already
// leased.
//
// A grant cannot be used late: every permit carries a send deadline (the
// earliest start + length − send allowance of its windows), and
// Permit.Send, which riot.Client calls in its HTTP transport immediately
// before the request goes on the wire, returns an expired permit unsent
// (the client acquires again). A late first send in a window moves the
// window's start, in KV for Shared, before the request goes. Local.Ceiling
// and Shared.Ceiling add key-wide ceilings (RIOT_MAX_PER_SECOND,
// RIOT_MAX_PER_MINUTE) counted like Riot's budgets.
//
// The design, its trade-offs and measured figures are in
// docs/rate-limiting.md.
package ratelimit
