// Package natsx holds the NATS helpers every riftflow service uses: an
// embedded JetStream server (single node or an in-process 3-node cluster for
// failover tests), Connect with sane reconnect defaults, W3C trace-context
// propagation over NATS headers, a consumer runner that settles each message
// exactly once, a KV lock with per-key TTL, and delayed re-delivery through
// JetStream message schedules.
//
// The JetStream behaviour these helpers rely on is described in the NATS
// docs: https://docs.nats.io/nats-concepts/jetstream (consumers, acks,
// MaxDeliver, advisories) and https://docs.nats.io/using-nats/developer/develop_jetstream/kv.
package natsx
