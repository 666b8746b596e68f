package config

import (
	"net/url"

	"github.com/riftflow/riftflow/pkg/redact"
)

// Env is the configuration common to every process: how it reaches NATS,
// Postgres and the Riot API, its ops server and the ingestion defaults.
// A process reads the sections it uses.
type Env struct {
	NATS      NATS
	Postgres  Postgres
	Riot      Riot
	Ops       Ops
	Ingestion Ingestion
}

// Load parses and validates Env from the environment, and has every log
// line and redacted error of this process mask its secrets (the Riot API
// key, the NATS password and token, the password in DATABASE_URL;
// redact.Register), valid or not.
func Load() (Env, error) {
	var e Env
	if err := Parse(&e); err != nil {
		return e, err
	}
	redact.Register(e.Riot.APIKey.Reveal(), e.NATS.Password.Reveal(), e.NATS.Token.Reveal())
	redact.Register(postgresPassword(e.Postgres.URL.Reveal()))
	return e, Validate(&e)
}

// postgresPassword is the password in a DATABASE_URL, in either form
// libpq takes: a URL (postgres://user:pw@host/db) or keyword/value
// (host=… password=pw, or password='p w' with quotes); "" if none.
func postgresPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
	}
	return redact.KeywordPassword(dsn)
}
