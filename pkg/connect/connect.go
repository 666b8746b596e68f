// Package connect dials NATS for a riftflow process from its configuration
// (config.NATS) and refuses a nats-server too old for riftflow. Every
// process uses it; Postgres (store.Connect) and the Riot client
// (pkg/riotclient) have their own packages, so a process links only the
// drivers it uses.
package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
)

// NATS connects to cfg.URL, or in-process to srv when it is non-nil, as
// name (the connection name the server shows). A connection with a user
// (NATS_USER) takes its replies on bus.InboxPrefix(user), the only inboxes
// the user's permissions allow (streams.Grants). It fails for an empty
// URL without srv, an unreachable server, or one older than
// MinServerVersion (CheckServerVersion); the connection is closed then.
func NATS(ctx context.Context, cfg config.NATS, srv nats.InProcessConnProvider, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	cc := natsx.ConnConfig{URL: cfg.URL, Name: name, User: cfg.User, Password: cfg.Password.Reveal(),
		Token: cfg.Token.Reveal(), NKeySeedFile: cfg.NKeySeedFile, CredsFile: cfg.CredsFile,
		TLSCAFile: cfg.TLSCA, TLSCertFile: cfg.TLSCert, TLSKeyFile: cfg.TLSKey, InProcess: srv, Logger: log}
	if cfg.User != "" {
		cc.InboxPrefix = bus.InboxPrefix(cfg.User)
	}
	if cc.URL == "" && srv == nil {
		return nil, nil, errors.New("NATS_URL is not set")
	}
	nc, err := natsx.Connect(ctx, cc)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckServerVersion(nc.ConnectedServerVersion()); err != nil {
		nc.Close()
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// MinServerVersion is the oldest nats-server riftflow runs on: per-key KV
// TTLs (sync locks, 2.11) and message schedules (fetch retries, 2.12).
const MinServerVersion = "2.12.0"

// CheckServerVersion fails with a clear message for a nats-server older
// than MinServerVersion (e.g. a distribution's 2.9), before anything is
// created on it. An empty version (unknown) passes.
func CheckServerVersion(v string) error {
	if v == "" || versionAtLeast(v, MinServerVersion) {
		return nil
	}
	return fmt.Errorf("nats-server %s is too old: riftflow needs %s or newer (per-key KV TTLs, message schedules); "+
		"unset NATS_URL to use the embedded server", v, MinServerVersion)
}

// versionAtLeast compares dotted versions numerically ("2.9.10" < "2.12.0");
// pre-release suffixes are ignored.
func versionAtLeast(v, min string) bool {
	parse := func(s string) [3]int {
		var out [3]int
		s, _, _ = strings.Cut(strings.TrimPrefix(s, "v"), "-")
		for i, p := range strings.SplitN(s, ".", 3) {
			out[i], _ = strconv.Atoi(p)
		}
		return out
	}
	a, b := parse(v), parse(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}
