// Package natsx holds the NATS helpers every riftflow service uses: an
// embedded JetStream server (single node or an in-process 3-node cluster for
// failover tests), Connect with sane reconnect defaults, W3C trace-context
// propagation over NATS headers, a consumer runner that settles each message
// exactly once, a KV lock with per-key TTL, and delayed re-delivery through
// JetStream message schedules.
//
// Verified facts and gotchas behind these helpers are in
// shared/nats-pgx-otel.md §1–§3.
package natsx
