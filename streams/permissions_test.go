package streams

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite deploy/nats/auth.conf from the permission table")

// deploy/nats/auth.conf is AuthConf of the default declarations, so the
// Kubernetes NATS server and `riftflow up` enforce the same table.
func TestAuthConf(t *testing.T) {
	set := loadSet(t, Options{})
	got, err := AuthConf(set)
	if err != nil {
		t.Fatal(err)
	}
	script, err := NSCScript(set)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"auth.conf": got, "nsc-users.sh": script} {
		path := filepath.Join("..", "deploy", "nats", name)
		if *update {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (generate it: cd streams && go test -run TestAuthConf -update)", err)
		}
		if string(want) != content {
			t.Errorf("%s differs from streams.Grants: run `cd streams && go test -run TestAuthConf -update`", path)
		}
	}
	for _, g := range Grants {
		if !strings.Contains(script, "--name "+g.User+" ") {
			t.Errorf("nsc-users.sh lacks user %s", g.User)
		}
	}
	for _, g := range Grants {
		if !strings.Contains(got, "$"+PasswordEnv(g.User)) {
			t.Errorf("auth.conf lacks the password variable of %s", g.User)
		}
	}
}

// The properties the table exists for: only the fetcher publishes fetch
// results; only Riot callers write the shared rate-limit state; nobody but
// the admin touches the JetStream API beyond its own streams; every user
// has its own inbox.
func TestPermissionsTable(t *testing.T) {
	set := loadSet(t, Options{Prefix: "tst", Regions: []string{"americas", "europe"}})
	perms, err := Permissions(set)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]UserPermissions{}
	for _, p := range perms {
		by[p.User] = p
	}
	for _, u := range []string{UserResolver, UserMatchIDLister, UserMatchFetcher, UserPersister, UserRetrySweeper, UserCLI, UserWeb, UserAdmin} {
		if _, ok := by[u]; !ok {
			t.Fatalf("no permissions for %s", u)
		}
	}
	allows := func(user, subj string) bool { return slices.Contains(by[user].Publish, subj) }
	for u, p := range by {
		if u == UserAdmin {
			continue
		}
		if allows(u, "tst.match.fetched.>") != (u == UserMatchFetcher) {
			t.Errorf("%s may publish fetch results: %v", u, allows(u, "tst.match.fetched.>"))
		}
		if w := allows(u, "$KV.ratelimit.>"); w != (u == UserResolver || u == UserMatchIDLister || u == UserMatchFetcher || u == UserRetrySweeper) {
			t.Errorf("%s may write the rate-limit state: %v", u, w)
		}
		for _, s := range p.Publish {
			if s == ">" || strings.HasPrefix(s, "$JS.API.STREAM.CREATE") || strings.HasPrefix(s, "$JS.API.STREAM.DELETE") || s == "$JS.API.>" {
				t.Errorf("%s may publish %s", u, s)
			}
		}
		if !slices.Equal(p.Subscribe[:1], []string{"_INBOX_" + u + ".>"}) {
			t.Errorf("%s subscribes %v, want its own inbox first", u, p.Subscribe)
		}
	}
	// The per-region fetcher consumers expand from the declarations.
	for _, c := range []string{"match-fetcher-americas", "match-fetcher-europe-interactive"} {
		if !allows(UserMatchFetcher, "$JS.API.CONSUMER.MSG.NEXT.FETCH."+c) {
			t.Errorf("the fetcher may not pull from %s", c)
		}
	}
	if allows(UserMatchFetcher, "$JS.API.CONSUMER.MSG.NEXT.FETCH.match-fetcher-asia") {
		t.Error("a region that is not configured was granted")
	}
	if ServiceUser("match-fetcher-europe") != UserMatchFetcher || ServiceUser("persister") != UserPersister {
		t.Error("ServiceUser")
	}
	// A grant naming something undeclared is an error.
	saved := Grants
	defer func() { Grants = saved }()
	Grants = []Grant{{User: "x", KVRead: []string{"nope"}}}
	if _, err := Permissions(set); err == nil {
		t.Error("a grant on an undeclared bucket was accepted")
	}
}

// TestReplayRights: a dead letter is replayed only where one of the
// non-admin users that may write its dead-letter subject may publish.
func TestReplayRights(t *testing.T) {
	set := loadSet(t, Options{})
	allow, err := ReplayRights(set)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dead, target string
		ok           bool
	}{
		{"lol.dead.FETCH", "lol.match.fetch.europe", true},      // the fetcher's own commands
		{"lol.dead.SYNC", "lol.sync.euw1", true},                // the sweeper may publish syncs
		{"lol.dead.FETCHED", "lol.match.fetched.europe", false}, // only the fetcher publishes results
		{"lol.dead.FETCHED", "lol.match.failed.europe", false},
		{"lol.dead.FETCHED", "lol.match.fetch.europe", true}, // a re-fetch (the sweeper may)
		{"lol.dead.INGEST", "lol.ingest.request", true},
		{"lol.dead.INGEST", "$KV.control.paused", false},
		{"lol.other", "lol.match.fetch.europe", false}, // nobody writes dead letters there
	} {
		if err := allow(c.dead, c.target); (err == nil) != c.ok {
			t.Errorf("allow(%s, %s) = %v, want ok=%v", c.dead, c.target, err, c.ok)
		}
	}
}
