package natsx

import (
	"github.com/riftflow/riftflow/pkg/redact"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnConfig says how to reach NATS. Empty fields are unused. Exactly one
// of User/Password, Token, NKeySeedFile or CredsFile is normally set.
type ConnConfig struct {
	// URL is one or more comma-separated server URLs (nats://, tls://,
	// ws://). Default nats.DefaultURL. Ignored when InProcess is set.
	URL string
	// Name is the connection name shown in server monitoring (the service).
	Name string
	// User and Password authenticate with a username and password.
	User, Password string
	// Token authenticates with a bearer token.
	Token string
	// NKeySeedFile is a file holding an NKey user seed.
	NKeySeedFile string
	// CredsFile is a decentralised-auth credentials file (JWT + seed).
	CredsFile string
	// TLSCAFile is a PEM file of CAs used to verify the server.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate and key
	// (mutual TLS). Both or neither.
	TLSCertFile, TLSKeyFile string
	// InboxPrefix replaces "_INBOX" as the prefix of reply subjects
	// (bus.InboxPrefix of the user, whose permissions allow only its own).
	InboxPrefix string
	// InProcess connects to an in-process server without a socket (a
	// *server.Server from internal/natsembed satisfies it).
	InProcess nats.InProcessConnProvider
	// Logger receives connection events; default slog.Default().
	Logger *slog.Logger
}

// ConnConfigFromEnv reads NATS_URL, NATS_USER, NATS_PASSWORD, NATS_TOKEN,
// NATS_NKEY_SEED_FILE, NATS_CREDS_FILE, NATS_TLS_CA, NATS_TLS_CERT and
// NATS_TLS_KEY. Unset variables leave fields empty.
func ConnConfigFromEnv() ConnConfig {
	return ConnConfig{
		URL:          os.Getenv("NATS_URL"),
		User:         os.Getenv("NATS_USER"),
		Password:     os.Getenv("NATS_PASSWORD"),
		Token:        os.Getenv("NATS_TOKEN"),
		NKeySeedFile: os.Getenv("NATS_NKEY_SEED_FILE"),
		CredsFile:    os.Getenv("NATS_CREDS_FILE"),
		TLSCAFile:    os.Getenv("NATS_TLS_CA"),
		TLSCertFile:  os.Getenv("NATS_TLS_CERT"),
		TLSKeyFile:   os.Getenv("NATS_TLS_KEY"),
	}
}

// String describes the config with secrets masked, for start-up logs.
func (c ConnConfig) String() string {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return "***"
	}
	return fmt.Sprintf("url=%q name=%q user=%q password=%q token=%q nkey=%q creds=%q tls_ca=%q tls_cert=%q",
		c.URL, c.Name, c.User, mask(c.Password), mask(c.Token), c.NKeySeedFile, c.CredsFile, c.TLSCAFile, c.TLSCertFile)
}

// Connect dials NATS and returns once connected (or when ctx ends, or the
// first connect fails for good). The connection reconnects forever
// (2 s between attempts with jitter, 8 MB reconnect buffer), pings every
// 20 s, and logs disconnects, reconnects, async errors and close at Logger.
// Errors: invalid config (e.g. TLS cert without key), unreadable
// NKey/creds/TLS files, authentication failure, or no server reachable.
func Connect(ctx context.Context, c ConnConfig) (*nats.Conn, error) {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	opts, err := connOptions(c, log)
	if err != nil {
		return nil, err
	}
	url := c.URL
	if c.InProcess != nil {
		opts = append(opts, nats.InProcessServer(c.InProcess))
		url = ""
	} else if url == "" {
		url = nats.DefaultURL
	}
	type res struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		nc, err := nats.Connect(url, opts...)
		ch <- res{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("natsx: connect %s: %w", redact.String(url), r.err)
		}
		log.Info("nats connected", "name", c.Name, "url", r.nc.ConnectedUrlRedacted())
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("natsx: connect %s: %w", redact.String(url), ctx.Err())
	}
}

// connOptions are c's connection options: reconnect for ever (2 s apart,
// jittered, 8 MiB buffered meanwhile), ping every 20 s, the connection's
// events logged on log, and c's credentials and TLS files. A TLS cert
// without its key (or the reverse) and an unreadable nkey seed are errors.
func connOptions(c ConnConfig, log *slog.Logger) ([]nats.Option, error) {
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return nil, errors.New("natsx: TLS cert and key must be set together")
	}
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(2 * time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.ReconnectBufSize(8 << 20),
		nats.Timeout(5 * time.Second),
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil {
				return // closed on purpose
			}
			log.Warn("nats disconnected", "name", c.Name, "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "name", c.Name, "url", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Info("nats connection closed", "name", c.Name)
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("nats async error", "name", c.Name, "subject", subj, "err", err)
		}),
	}
	if c.User != "" || c.Password != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("natsx: nkey seed %s: %w", c.NKeySeedFile, err)
		}
		opts = append(opts, o)
	}
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(c.TLSCAFile))
	}
	if c.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(c.TLSCertFile, c.TLSKeyFile))
	}
	return opts, nil
}
