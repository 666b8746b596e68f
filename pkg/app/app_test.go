package app

import (
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/redact"
)

func TestCheckServerVersion(t *testing.T) {
	for v, ok := range map[string]bool{"2.9.10": false, "2.11.3": false, "2.12.0": true, "2.15.2": true,
		"v2.14.0-beta.1": true, "3.0.0": true, "": true} {
		if err := CheckServerVersion(v); (err == nil) != ok {
			t.Errorf("%q: err = %v, want ok=%v", v, err, ok)
		}
	}
}

// Issue 27 finding 10: LoadEnv registers the password of a keyword/value
// DATABASE_URL for redaction, so a text that holds it without the
// "password=" keyword (an echo of the value) is masked too.
func TestLoadEnvRegistersKeywordValuePassword(t *testing.T) {
	for _, dsn := range []string{
		"host=127.0.0.1 user=riftflow password=kvSecret4711 dbname=riftflow",
		"host=127.0.0.1 password='kv Secret 4712' dbname=riftflow",
		"postgres://riftflow:urlSecret4713@127.0.0.1/riftflow",
	} {
		t.Setenv("DATABASE_URL", dsn)
		if _, err := LoadEnv(); err != nil {
			t.Fatal(err)
		}
		pw := postgresPassword(dsn)
		if pw == "" {
			t.Fatalf("no password found in %q", dsn)
		}
		if got := redact.String("auth failed for " + pw); strings.Contains(got, pw) {
			t.Errorf("%q not registered: %q", pw, got)
		}
	}
}
