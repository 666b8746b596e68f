package streams

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	subj "github.com/riftflow/riftflow/pkg/natsx/subject"
)

// NATS users, one per service. Each service connects as its own user and
// may publish and subscribe only where Grants says; the server refuses the
// rest (docs/security.md).
const (
	UserResolver      = "resolver"
	UserMatchIDLister = "matchid-lister"
	UserMatchFetcher  = "match-fetcher"
	UserPersister     = "persister"
	UserRetrySweeper  = "retry-sweeper"
	// UserCLI is the riftflow CLI and HTTP API: it submits ingest
	// requests and reads progress, rejections and the shared state.
	UserCLI = "riftflow"
	// UserWeb reads progress events and rejections, nothing else: the
	// user of browsers on the embedded server's WebSocket listener.
	UserWeb = "web"
	// UserAdmin applies the declarations (`riftflow streams apply`),
	// replays dead letters (`riftflow retry --dead`) and may do anything.
	UserAdmin = "admin"
)

// Grant is what one NATS user may do, in terms of the declarations in
// streams.json. Subjects hold "{prefix}" like the declarations. Permissions
// expands it into the publish and subscribe subjects nats-server checks,
// JetStream API calls included.
type Grant struct {
	User string
	// Publish lists the subjects the user publishes on (JetStream
	// publishes and dead letters included).
	Publish []string
	// Subscribe lists core NATS subscriptions (the CLI follows progress).
	Subscribe []string
	// Consume lists the durable consumers the user pulls from and acks; a
	// trailing "*" matches every consumer whose name starts with the rest
	// (the per-region fetcher consumers).
	Consume []string
	// Ordered lists streams the user reads with ordered (ephemeral)
	// consumers.
	Ordered []string
	// Messages lists streams whose messages the user gets and deletes by
	// sequence or subject (the retry-sweeper's advisory handling, and its
	// ending of requests that wait until they would expire).
	Messages []string
	// Info lists streams whose state (STREAM.INFO: messages, bytes) the
	// user reads (the match-fetcher's backpressure on FETCHED).
	Info []string
	// KVRead and KVWrite list KV buckets read (get, watch, list keys) and
	// written (put, create, update, delete; includes read).
	KVRead, KVWrite []string
	// KVErase lists KV buckets whose stream the user purges by subject (an
	// erasure of one key that leaves no KV purge marker naming it).
	KVErase []string
	// Objects lists object stores read and written.
	Objects []string
	// All allows every subject (the admin user).
	All bool
}

// Grants is the permission table: the single source of truth for
// `riftflow up` (its embedded server runs with these users) and for the
// Kubernetes NATS config (deploy/nats/auth.conf, rendered by AuthConf).
// Every service may dead-letter only what it consumes; only the fetcher
// may publish fetch results, and only Riot callers may write the shared
// rate-limit state (a forged "key rejected" would halt every fetch).
var Grants = []Grant{
	{User: UserResolver, KVRead: []string{BucketControl},
		Consume: []string{ConsumerResolver, ConsumerResolverBackground},
		Publish: []string{"{prefix}.sync.>", "{prefix}.ingest.rejected", "{prefix}.dead." + StreamIngest},
		KVWrite: []string{BucketRiotIDs, BucketRateLimit}},
	{User: UserMatchIDLister, KVRead: []string{BucketControl},
		Consume: []string{ConsumerMatchIDLister, ConsumerMatchIDListerInteractive},
		Publish: []string{"{prefix}.match.fetch.>", "{prefix}.progress.>", "{prefix}.ingest.rejected", "{prefix}.dead." + StreamSync},
		KVWrite: []string{BucketSyncLocks, BucketCursors, BucketRateLimit}},
	{User: UserMatchFetcher, KVRead: []string{BucketControl},
		Consume: []string{fetcherPrefix + "*"},
		Info:    []string{StreamFetched},
		Publish: []string{"{prefix}.match.fetched.>", "{prefix}.match.failed.>", "{prefix}.match.fetch.>",
			"{prefix}.match.retry.>", "{prefix}.dead." + StreamFetch},
		KVWrite: []string{BucketRateLimit},
		Objects: []string{ObjectPayloads}},
	{User: UserPersister, KVRead: []string{BucketControl},
		Consume: []string{ConsumerPersister, ConsumerPersisterInteractive},
		Publish: []string{"{prefix}.progress.>", "{prefix}.dead." + StreamFetched},
		KVWrite: []string{BucketSyncLocks},
		Objects: []string{ObjectPayloads}},
	{User: UserRetrySweeper, KVRead: []string{BucketControl},
		Consume: []string{ConsumerRetrySweeper, ConsumerRetrySweeperRejections, ConsumerRetrySweeperQueued},
		Publish: []string{"{prefix}.match.fetch.>", "{prefix}.progress.>", "{prefix}.sync.>", "{prefix}.ingest.request", "{prefix}.ingest.request.background",
			"{prefix}.ingest.rejected",
			"{prefix}.report.weekly", "{prefix}.dead.>"},
		Messages: []string{StreamIngest, StreamSync, StreamFetch, StreamFetched},
		KVWrite:  []string{BucketSyncLocks, BucketCronLocks, BucketRateLimit}},
	// The CLI/API user also serves the admin routes: the pause switch
	// (control), retry (fetch commands) and forget (locks, cursors, the
	// Riot ID cache, the read cache, and the player's EVENTS and DEAD
	// messages).
	{User: UserCLI,
		Publish:   []string{"{prefix}.ingest.request", "{prefix}.ingest.request.background", "{prefix}.ingest.rejected", "{prefix}.match.fetch.>"},
		Subscribe: []string{"{prefix}.progress.>", "{prefix}.ingest.rejected"},
		Ordered:   []string{StreamEvents, StreamDead},
		Messages:  []string{StreamEvents, StreamDead},
		KVErase:   []string{BucketRiotIDs, BucketSyncLocks, BucketCursors},
		KVRead:    []string{BucketRateLimit},
		KVWrite:   []string{BucketControl, BucketRiotIDs, BucketSyncLocks, BucketCursors, BucketReadCache}},
	{User: UserWeb, Subscribe: []string{"{prefix}.progress.>", "{prefix}.ingest.rejected"}},
	{User: UserAdmin, All: true},
}

// ServiceUser is the NATS user of a service binary ("match-fetcher" for
// every regional fetcher).
func ServiceUser(service string) string {
	if strings.HasPrefix(service, fetcherPrefix) {
		return UserMatchFetcher
	}
	return service
}

// UserPermissions is one user's allow lists, as nats-server takes them.
// An empty Publish list allows no publish at all (nats-server reads an
// empty allow list as "everything", so renderers deny ">" instead).
type UserPermissions struct {
	User      string
	Publish   []string
	Subscribe []string
}

// Permissions expands Grants for the declarations in s (prefix, regions).
// Errors: a grant naming a consumer, stream, bucket or object store that s
// does not declare.
func Permissions(s *Set) ([]UserPermissions, error) {
	out := make([]UserPermissions, 0, len(Grants))
	for _, g := range Grants {
		p, err := g.expand(s)
		if err != nil {
			return nil, fmt.Errorf("streams: permissions of %s: %w", g.User, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (g Grant) expand(s *Set) (UserPermissions, error) {
	p := UserPermissions{User: g.User}
	if g.All {
		p.Publish, p.Subscribe = []string{">"}, []string{">"}
		return p, nil
	}
	pub := func(subj ...string) {
		for _, x := range subj {
			p.Publish = append(p.Publish, strings.ReplaceAll(x, "{prefix}", s.Prefix))
		}
	}
	sub := func(subj ...string) {
		for _, x := range subj {
			p.Subscribe = append(p.Subscribe, strings.ReplaceAll(x, "{prefix}", s.Prefix))
		}
	}
	sub(bus.InboxPrefix(g.User) + ".>")
	pub(g.Publish...)
	sub(g.Subscribe...)
	for _, want := range g.Consume {
		n := 0
		for _, c := range s.Consumers {
			name := c.Config.Durable
			if name == want || strings.HasSuffix(want, "*") && strings.HasPrefix(name, strings.TrimSuffix(want, "*")) {
				n++
				pub("$JS.API.CONSUMER.INFO."+c.Stream+"."+name, "$JS.API.CONSUMER.MSG.NEXT."+c.Stream+"."+name,
					"$JS.ACK."+c.Stream+"."+name+".>")
			}
		}
		if n == 0 {
			return p, fmt.Errorf("no consumer %q declared", want)
		}
	}
	ordered := func(stream string) {
		pub("$JS.API.STREAM.INFO."+stream, "$JS.API.CONSUMER.CREATE."+stream, "$JS.API.CONSUMER.CREATE."+stream+".>",
			"$JS.API.CONSUMER.DELETE."+stream+".>", "$JS.API.CONSUMER.INFO."+stream+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+stream+".>", "$JS.FC."+stream+".>")
	}
	get := func(stream string) {
		pub("$JS.API.STREAM.INFO."+stream, "$JS.API.STREAM.MSG.GET."+stream, "$JS.API.DIRECT.GET."+stream,
			"$JS.API.DIRECT.GET."+stream+".>")
	}
	for _, st := range g.Ordered {
		if s.Stream(st) == nil {
			return p, fmt.Errorf("no stream %q declared", st)
		}
		ordered(st)
	}
	for _, st := range g.Info {
		if s.Stream(st) == nil {
			return p, fmt.Errorf("no stream %q declared", st)
		}
		pub("$JS.API.STREAM.INFO." + st)
	}
	for _, st := range g.Messages {
		if s.Stream(st) == nil {
			return p, fmt.Errorf("no stream %q declared", st)
		}
		get(st)
		pub("$JS.API.STREAM.MSG.DELETE." + st)
	}
	for _, b := range append(slices.Clone(g.KVRead), g.KVWrite...) {
		if !slices.ContainsFunc(s.Buckets, func(c jetstream.KeyValueConfig) bool { return c.Bucket == b }) {
			return p, fmt.Errorf("no KV bucket %q declared", b)
		}
		get("KV_" + b)
		ordered("KV_" + b)
	}
	for _, b := range g.KVWrite {
		pub("$KV." + b + ".>")
	}
	for _, b := range g.KVErase {
		if !slices.ContainsFunc(s.Buckets, func(c jetstream.KeyValueConfig) bool { return c.Bucket == b }) {
			return p, fmt.Errorf("no KV bucket %q declared", b)
		}
		get("KV_" + b)
		pub("$JS.API.STREAM.PURGE.KV_" + b)
	}
	for _, b := range g.Objects {
		if !slices.ContainsFunc(s.Objects, func(c jetstream.ObjectStoreConfig) bool { return c.Bucket == b }) {
			return p, fmt.Errorf("no object store %q declared", b)
		}
		get("OBJ_" + b)
		ordered("OBJ_" + b)
		pub("$O."+b+".>", "$JS.API.STREAM.PURGE.OBJ_"+b)
	}
	p.Publish, p.Subscribe = dedup(p.Publish), dedup(p.Subscribe)
	return p, nil
}

func dedup(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// AuthConf renders the permission table as a nats-server configuration
// block (an "authorization" block to include from the server config).
// Each user's password is the environment variable
// NATS_PASSWORD_<USER> (upper case, "-" as "_"), which the server
// resolves at start-up from a Kubernetes Secret: see PasswordEnv.
func AuthConf(s *Set) (string, error) {
	head := generatedBy +
		"# Do not edit: TestAuthConf fails when this file and the table differ.\n" +
		"# Passwords are environment variables fed from the Secret nats-users\n" +
		"# (docs/security.md explains how to include this file and rotate them).\n" +
		"authorization {\n  users = [\n"
	return render(s, head, "  ]\n}\n", func(b *strings.Builder, p UserPermissions) {
		fmt.Fprintf(b, "    {\n      user: %q\n      password: $%s\n      permissions: {\n", p.User, PasswordEnv(p.User))
		if len(p.Publish) == 0 {
			b.WriteString("        publish: { deny: [\">\"] }\n")
		} else {
			fmt.Fprintf(b, "        publish: { allow: %s }\n", confList(p.Publish))
		}
		fmt.Fprintf(b, "        subscribe: { allow: %s }\n", confList(p.Subscribe))
		b.WriteString("      }\n    }\n")
	})
}

// generatedBy opens the header of each file rendered from the table.
const generatedBy = "# Generated from streams/permissions.go (streams.Grants) by\n" +
	"#   cd streams && go test -run TestAuthConf -update\n"

// render writes head, then user for each user's permissions (Permissions
// of s), then tail.
func render(s *Set, head, tail string, user func(*strings.Builder, UserPermissions)) (string, error) {
	perms, err := Permissions(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(head)
	for _, p := range perms {
		user(&b, p)
	}
	b.WriteString(tail)
	return b.String(), nil
}

// PasswordEnv is the environment variable holding user's NATS password in
// the server's environment: NATS_PASSWORD_<USER>, e.g.
// NATS_PASSWORD_MATCH_FETCHER.
func PasswordEnv(user string) string {
	return "NATS_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
}

func confList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// NSCScript renders the permission table as `nsc add user` commands for
// operator mode (users as JWTs in account "riftflow", deploy/nats/
// values-prod.yaml), where an authorization block does not apply. Each
// user's credentials file then goes to its service as NATS_CREDS_FILE.
func NSCScript(s *Set) (string, error) {
	head := "#!/bin/sh\n" + generatedBy +
		"# Do not edit. Operator mode: one JWT user per service in account riftflow,\n" +
		"# with the same allow lists as auth.conf (docs/security.md).\nset -e\n"
	return render(s, head, "", func(b *strings.Builder, p UserPermissions) {
		fmt.Fprintf(b, "nsc add user --account riftflow --name %s", p.User)
		if len(p.Publish) == 0 {
			b.WriteString(" \\\n  --deny-pub '>'")
		} else {
			fmt.Fprintf(b, " \\\n  --allow-pub '%s'", strings.Join(p.Publish, ","))
		}
		fmt.Fprintf(b, " \\\n  --allow-sub '%s'\n", strings.Join(p.Subscribe, ","))
	})
}

// ReplayRights is the Allow check of a dead-letter replay
// (natsx.ReplayFilter.Allow in pkg/natsx) for the permission table expanded for s: a
// dead letter stored on deadSubject may be republished, with the admin's
// rights, on target only if a user other than admin that may publish on
// deadSubject may publish on target too. So a replay gives whoever wrote a
// dead letter nothing it could not do itself: the persister, which
// dead-letters fetch results, cannot have a fetch result replayed (it may
// not publish one), while the fetcher's dead fetch commands go back to
// lol.match.fetch. Errors: those of Permissions.
func ReplayRights(s *Set) (func(deadSubject, target string) error, error) {
	perms, err := Permissions(s)
	if err != nil {
		return nil, err
	}
	allows := func(p UserPermissions, subject string) bool {
		return slices.ContainsFunc(p.Publish, func(f string) bool { return subj.Matches(f, subject) })
	}
	return func(deadSubject, target string) error {
		var writers []string
		for _, p := range perms {
			if p.User == UserAdmin || !allows(p, deadSubject) {
				continue
			}
			if allows(p, target) {
				return nil
			}
			writers = append(writers, p.User)
		}
		if len(writers) == 0 {
			return fmt.Errorf("no service may publish dead letters on %s", deadSubject)
		}
		return fmt.Errorf("%s is outside the publish rights of %s, who may write %s",
			target, strings.Join(writers, ", "), deadSubject)
	}, nil
}
