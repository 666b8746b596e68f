package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

func dataDir() string {
	if d := os.Getenv("RIFTFLOW_DATA_DIR"); d != "" {
		return d
	}
	return ".data"
}

func newLogger(w io.Writer, env config.Env) *slog.Logger {
	level, err := telemetry.LevelFromString(env.Ops.LogLevel)
	if err != nil {
		level = slog.LevelInfo
	}
	return telemetry.NewLogger(w, level, env.Ops.LogFormat)
}

// localNATS fills env.NATS from the files a local `riftflow up` wrote when
// NATS_URL is unset: .data/nats.url (the CLI user) or, for admin commands
// (streams apply, retry --dead), .data/nats-admin.url. The user and
// password in the file become NATS_USER and NATS_PASSWORD.
func localNATS(env *config.Env, admin bool) error {
	if env.NATS.URL != "" {
		return nil
	}
	name := "nats.url"
	if admin {
		name = "nats-admin.url"
	}
	b, err := os.ReadFile(filepath.Join(dataDir(), name))
	if err != nil {
		return fmt.Errorf("NATS_URL is not set and no local `riftflow up` was found (.data/%s)", name)
	}
	u, err := url.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf(".data/%s: %s", name, redact.String(err.Error()))
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		redact.Register(pw)
		env.NATS.User, env.NATS.Password = u.User.Username(), config.Secret(pw)
		u.User = nil
	}
	env.NATS.URL = u.String()
	return nil
}

// openStore opens the store at dbURL(env); the caller closes it.
func openStore(ctx context.Context, env config.Env) (*store.Store, error) {
	url, err := dbURL(env)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, url)
}

// loadDB loads the environment and finds the database (dbURL).
func loadDB() (config.Env, string, error) {
	env, err := config.Load()
	if err != nil {
		return env, "", err
	}
	url, err := dbURL(env)
	return env, url, err
}

// dbURL is DATABASE_URL, or the throwaway cluster a local `riftflow up` started.
func dbURL(env config.Env) (string, error) {
	if env.Postgres.URL != "" {
		return env.Postgres.URL.Reveal(), nil
	}
	b, err := os.ReadFile(filepath.Join(dataDir(), "database.url"))
	if err != nil {
		return "", errors.New("DATABASE_URL is not set and no local `riftflow up` was found (.data/database.url)")
	}
	return strings.TrimSpace(string(b)), nil
}

// connectCLI loads the environment and connects an admin command (pause,
// forget, rotate-key, retry, streams apply, ...) to NATS as name: NATS_URL,
// or a local `riftflow up`'s admin user, whose permissions cover every
// bucket and stream they write (dialNATS); its log goes to stderr. The
// caller closes nc.
func connectCLI(ctx context.Context, name string, stderr io.Writer) (config.Env, *slog.Logger, *nats.Conn, jetstream.JetStream, error) {
	env, err := config.Load()
	if err != nil {
		return env, nil, nil, nil, err
	}
	log := newLogger(stderr, env)
	nc, js, err := dialNATS(ctx, &env, true, name, log)
	return env, log, nc, js, err
}

// dialNATS connects a CLI command to NATS as name: NATS_URL or, when that
// is unset, the local `riftflow up`'s server (localNATS, as its admin user
// when admin, else as its CLI user), filling env.NATS. The connection's
// events go to log, or nowhere when log is nil. The caller closes nc.
func dialNATS(ctx context.Context, env *config.Env, admin bool, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	if err := localNATS(env, admin); err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return connect.NATS(ctx, env.NATS, nil, name, log)
}

// randHex is n random bytes in hex (stack.RandHex).
var randHex = stack.RandHex

func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "local"
}

// localToken revokes the token an earlier `riftflow up` made for the
// local user and makes a new admin token, written to .data/api.token
// (mode 0600) for local tools.
func localToken(ctx context.Context, st *stack.Stack) (string, error) {
	ts := api.NewTokens(st.Infra.Store)
	name := "riftflow up: " + localUser()
	if _, err := ts.RevokeName(ctx, name); err != nil {
		return "", err
	}
	token, _, err := ts.Create(ctx, name, []api.Scope{api.ScopeAdmin})
	if err != nil {
		return "", err
	}
	stack.WriteFile(dataDir(), "api.token", token)
	return token, nil
}
