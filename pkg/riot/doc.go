// Package riot is riftflow's client for the Riot Games API (League of
// Legends): account-v1, match-v5 and league-v4, plus the routing table
// (routing.go), the rate-limiter contract and error taxonomy (limiter.go),
// and tolerant decoders for MatchDto and TimelineDto (dto.go).
//
// A Client sends every request through a Limiter (pkg/ratelimit implements
// it), checking the grant's send deadline with Permit.Send immediately
// before the request goes on the wire (a late grant is returned and
// retaken, never sent), reporting each answer's status and headers back
// with Permit.Done, and
// through one circuit breaker per routing host. The API key travels only in
// the X-Riot-Token header; it never appears in URLs, errors, logs, spans or
// metrics. Every error a Client returns is an *Error whose Kind tells the
// caller whether and when to retry:
//
//	status            Kind               retry
//	429               KindRateLimited    at RetryAt (Retry-After + 0.5 s, or a backoff from 1 s)
//	5xx               KindServer         with backoff (the caller's schedule), at least Retry-After if sent
//	timeout, reset    KindTransport      with backoff
//	404               KindNotFound       not in a loop
//	401, 403          KindKeyRejected    never; the client refuses all further calls
//	other 4xx         KindBadRequest     never
//	bad 200 body      KindDecode         never
//	breaker open      KindBreakerOpen    at RetryAt
//
// Calls are interactive unless their context is marked with WithBackground.
//
// Sources: the Riot developer portal (https://developer.riotgames.com/apis,
// https://developer.riotgames.com/docs/portal) and the community OpenAPI
// spec (https://github.com/MingweiSamuel/riotapi-schema), a copy of which is
// in testdata/riot-fixtures/openapi.
package riot
