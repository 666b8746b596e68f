package stack

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/config"
)

// Without DATABASE_URL, `riftflow up` refuses to start unless told to use
// a throwaway cluster (--ephemeral-db): a typo in DATABASE_URL must not send
// writes to a database that disappears.
func TestUpNeedsDatabaseURLOrEphemeralFlag(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("NATS_URL", "")
	env, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	_, err = Start(context.Background(), Options{DataDir: t.TempDir(), Env: env, NATSPort: -1, MemoryStreams: true, Log: quiet})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not set") || !strings.Contains(err.Error(), "--ephemeral-db") {
		t.Fatalf("Start without DATABASE_URL: %v, want an error naming --ephemeral-db", err)
	}
	env.Postgres.URL = "postgres://localhost:1/x"
	_, err = Start(context.Background(), Options{DataDir: t.TempDir(), Env: env, NATSPort: -1, MemoryStreams: true, Log: quiet, EphemeralDB: true})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("Start with DATABASE_URL and --ephemeral-db: %v, want an error", err)
	}
}
