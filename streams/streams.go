// Package streams declares riftflow's JetStream streams, durable consumers
// and KV buckets once, as data (streams.json, embedded), and applies them
// idempotently to a JetStream account. Services bind to the consumers
// declared here and never create them ad hoc; the Kubernetes KEDA
// manifests use the same names (the constants below).
//
// The declarations are in the JSON shape of jetstream.StreamConfig,
// ConsumerConfig and KeyValueConfig (durations in nanoseconds).
// "{prefix}" in subjects is replaced by Options.Prefix, so all subjects
// move together; "{region}" expands a per_region consumer into one consumer
// per regional route. Replicas and test overrides are applied by Load. The
// README in this directory explains every setting.
package streams

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/riftflow/riftflow/pkg/bus"
)

// Stream names.
const (
	StreamIngest     = "INGEST"
	StreamSync       = "SYNC"
	StreamFetch      = "FETCH"
	StreamFetched    = "FETCHED"
	StreamEvents     = "EVENTS"
	StreamAdvisories = "ADVISORIES"
	StreamDead       = "DEAD"
)

// Durable consumer names (see also FetcherConsumer). Every stage reads two
// queues, interactive and background, through two consumers, and serves
// each with its own workers, so a user's sync never waits behind a
// backfill at any stage (bus.Subjects.IngestFor, SyncFor, FetchFor,
// FetchedFor).
const (
	// ConsumerResolver reads the public ingest subject (interactive).
	ConsumerResolver = "resolver"
	// ConsumerResolverBackground reads "<prefix>.ingest.request.background".
	ConsumerResolverBackground = "resolver-background"
	// ConsumerMatchIDLister reads background sync commands.
	ConsumerMatchIDLister = "matchid-lister"
	// ConsumerMatchIDListerInteractive reads "<prefix>.sync.*.interactive".
	ConsumerMatchIDListerInteractive = "matchid-lister-interactive"
	// ConsumerPersister reads the results of background fetches.
	ConsumerPersister = "persister"
	// ConsumerPersisterInteractive reads "<prefix>.match.{fetched,failed}.*.interactive".
	ConsumerPersisterInteractive = "persister-interactive"
	ConsumerRetrySweeper         = "retry-sweeper"
	// ConsumerRetrySweeperRejections reads "<prefix>.ingest.rejected" on
	// EVENTS: a refused request's pending job becomes rejected.
	ConsumerRetrySweeperRejections = "retry-sweeper-rejections"
	// ConsumerRetrySweeperQueued reads "<prefix>.ingest.queued.>" on
	// EVENTS, INGEST's copy of every request it stored: each becomes a
	// pending job, whoever published it and whether or not the resolver
	// runs.
	ConsumerRetrySweeperQueued = "retry-sweeper-queued"
	fetcherPrefix              = "match-fetcher-"
)

// KV bucket names.
const (
	BucketRiotIDs   = "riot-ids"
	BucketSyncLocks = "sync-locks"
	BucketCursors   = "cursors"
	BucketRateLimit = "ratelimit"
	BucketCronLocks = "cron-locks"
	BucketControl   = "control"
	// BucketReadCache is the HTTP API's read cache, shared by its
	// replicas: per-key TTLs (design 002's lifetimes), gzip bodies.
	BucketReadCache = "read-cache"
)

// Object store buckets.
const (
	// ObjectPayloads holds fetch payloads too large for a NATS message
	// (bus.FetchResult.PayloadRef names the object).
	ObjectPayloads = "payloads"
)

// DefaultRegions are Riot's regional routing values, one FETCH consumer
// each.
var DefaultRegions = []string{"americas", "asia", "europe", "sea"}

// FetcherConsumer is the name of the FETCH consumer for a regional route:
// "match-fetcher-<region>".
func FetcherConsumer(region string) string { return fetcherPrefix + region }

// InteractiveFetcherConsumer is the name of the FETCH consumer for
// interactive fetches on a regional route: "match-fetcher-<region>-interactive".
// Interactive and background fetches are separate queues, so a user's
// request is never behind a backlog in JetStream; the rate limiter then
// serves interactive calls first.
func InteractiveFetcherConsumer(region string) string { return fetcherPrefix + region + "-interactive" }

//go:embed streams.json
var declarations []byte

// Options parameterises Load. Zero values take the defaults given.
type Options struct {
	// Prefix is the first subject token(s); default bus.DefaultPrefix ("lol").
	Prefix string
	// Replicas for every stream, consumer and bucket; default 1. Use 3 on a
	// 3-node cluster.
	Replicas int
	// Regions gets one match-fetcher consumer each; default DefaultRegions.
	Regions []string
	// AckWait, if > 0, replaces every consumer's AckWait (tests).
	AckWait time.Duration
	// MaxDeliver, if ≠ 0, replaces every consumer's MaxDeliver (tests).
	MaxDeliver int
	// MemoryStorage puts every stream and bucket in memory (tests, demos),
	// with a stream's byte cap (DEAD's 1 GiB) lowered to 16 MiB, since
	// JetStream reserves it from the server's memory at creation.
	MemoryStorage bool
	// MaxStreamBytes, if > 0, lowers every stream byte cap above it to it:
	// JetStream reserves a cap on every replica's disk at creation, so a
	// node with a small store (a test's 64 MiB tmpfs) could place no
	// stream with DEAD's 1 GiB.
	MaxStreamBytes int64
}

// Consumer is a durable consumer declared on a stream.
type Consumer struct {
	// Stream is the stream the consumer reads.
	Stream string `json:"stream"`
	// PerRegion expands the declaration once per region, replacing
	// "{region}" in the name and filter subjects.
	PerRegion bool `json:"per_region,omitempty"`
	// Config is the consumer configuration; Durable is its name.
	Config jetstream.ConsumerConfig `json:"config"`
}

// Set is a loaded, fully expanded set of declarations, ready for Apply.
type Set struct {
	Prefix    string
	Streams   []jetstream.StreamConfig
	Consumers []Consumer
	Buckets   []jetstream.KeyValueConfig
	Objects   []jetstream.ObjectStoreConfig
}

// memoryMaxBytes is the largest stream byte cap under
// Options.MemoryStorage.
const memoryMaxBytes = 16 << 20

// Stream returns the declared stream called name, or nil.
func (s *Set) Stream(name string) *jetstream.StreamConfig {
	for i := range s.Streams {
		if s.Streams[i].Name == name {
			return &s.Streams[i]
		}
	}
	return nil
}

// Consumer returns the declared consumer called name, or nil.
func (s *Set) Consumer(name string) *Consumer {
	for i := range s.Consumers {
		if s.Consumers[i].Config.Durable == name {
			return &s.Consumers[i]
		}
	}
	return nil
}

var (
	tokensRe = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
	tokenRe  = regexp.MustCompile(`^[a-z0-9_-]+$`)
)

// Load parses the embedded declarations and expands them for o.
// Errors: an invalid prefix (must be dot-separated tokens of letters,
// digits, '-' or '_', no wildcards) or region, or a declaration file that
// does not parse.
func Load(o Options) (*Set, error) {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if !tokensRe.MatchString(o.Prefix) {
		return nil, fmt.Errorf("streams: invalid subject prefix %q", o.Prefix)
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if len(o.Regions) == 0 {
		o.Regions = DefaultRegions
	}
	for _, r := range o.Regions {
		if !tokenRe.MatchString(r) {
			return nil, fmt.Errorf("streams: invalid region %q", r)
		}
	}
	raw := strings.ReplaceAll(string(declarations), "{prefix}", o.Prefix)
	var decl struct {
		Streams   []jetstream.StreamConfig      `json:"streams"`
		Consumers []Consumer                    `json:"consumers"`
		Buckets   []jetstream.KeyValueConfig    `json:"buckets"`
		Objects   []jetstream.ObjectStoreConfig `json:"object_stores"`
	}
	if err := json.Unmarshal([]byte(raw), &decl); err != nil {
		return nil, fmt.Errorf("streams: parse streams.json: %w", err)
	}
	set := &Set{Prefix: o.Prefix, Streams: decl.Streams, Buckets: decl.Buckets, Objects: decl.Objects}
	for i := range set.Objects {
		set.Objects[i].Replicas = o.Replicas
		if o.MemoryStorage {
			set.Objects[i].Storage = jetstream.MemoryStorage
		}
	}
	for i := range set.Streams {
		set.Streams[i].Replicas = o.Replicas
		if o.MemoryStorage {
			set.Streams[i].Storage = jetstream.MemoryStorage
			// A byte cap is reserved up front: in memory, keep it small.
			if set.Streams[i].MaxBytes > memoryMaxBytes {
				set.Streams[i].MaxBytes = memoryMaxBytes
			}
		}
		if o.MaxStreamBytes > 0 && set.Streams[i].MaxBytes > o.MaxStreamBytes {
			set.Streams[i].MaxBytes = o.MaxStreamBytes
		}
	}
	for i := range set.Buckets {
		set.Buckets[i].Replicas = o.Replicas
		if o.MemoryStorage {
			set.Buckets[i].Storage = jetstream.MemoryStorage
		}
	}
	for _, c := range decl.Consumers {
		if o.AckWait > 0 {
			c.Config.AckWait = o.AckWait
		}
		if o.MaxDeliver != 0 {
			c.Config.MaxDeliver = o.MaxDeliver
		}
		c.Config.Replicas = o.Replicas
		c.Config.MemoryStorage = o.MemoryStorage
		if !c.PerRegion {
			c.Config.Name = c.Config.Durable
			set.Consumers = append(set.Consumers, c)
			continue
		}
		for _, r := range o.Regions {
			rc := c
			rc.PerRegion = false
			rc.Config.Durable = strings.ReplaceAll(c.Config.Durable, "{region}", r)
			rc.Config.Name = rc.Config.Durable
			rc.Config.FilterSubject = strings.ReplaceAll(c.Config.FilterSubject, "{region}", r)
			rc.Config.FilterSubjects = slices.Clone(c.Config.FilterSubjects)
			for j := range rc.Config.FilterSubjects {
				rc.Config.FilterSubjects[j] = strings.ReplaceAll(rc.Config.FilterSubjects[j], "{region}", r)
			}
			set.Consumers = append(set.Consumers, rc)
		}
	}
	return set, nil
}
