package riftflow

import (
	"bytes"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
)

// `riftflow token create|list|revoke` end to end on a migrated database.
func TestTokenCommands(t *testing.T) {
	url := pgtest.NewDatabase(t)
	if err := store.Migrate(t.Context(), url, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", url)
	t.Setenv("RIFTFLOW_DATA_DIR", t.TempDir())
	run := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := Main(args, &out, &errOut)
		return out.String() + errOut.String(), code
	}
	out, code := run("token", "create", "--name", "dashboard", "--scopes", "read,sync")
	token := regexp.MustCompile(`rft_[0-9a-f]{16}_[A-Za-z0-9_-]{43}`).FindString(out)
	if code != 0 || token == "" {
		t.Fatalf("token create: %d %s", code, out)
	}
	st, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := api.NewTokens(st).Verify(t.Context(), token)
	if err != nil || got.Name != "dashboard" || !got.Allows(api.ScopeSync) || got.Allows(api.ScopeAdmin) {
		t.Fatalf("Verify(created token) = %+v, %v", got, err)
	}
	if out, code := run("token", "create", "--name", "x", "--scopes", "root"); code == 0 || !strings.Contains(out, "unknown scope") {
		t.Errorf("unknown scope: %d %s", code, out)
	}
	out, code = run("token", "list")
	if code != 0 || !strings.Contains(out, got.ID) || !strings.Contains(out, "read,sync") || strings.Contains(out, token[21:]) {
		t.Errorf("token list: %d %s", code, out)
	}
	if out, code := run("token", "revoke", got.ID); code != 0 {
		t.Fatalf("token revoke: %d %s", code, out)
	}
	if _, err := api.NewTokens(st).Verify(t.Context(), token); err != api.ErrBadToken {
		t.Errorf("Verify(revoked) = %v, want ErrBadToken", err)
	}
	if out, code := run("token", "revoke", got.ID); code == 0 {
		t.Errorf("revoking twice succeeded: %s", out)
	}
}
