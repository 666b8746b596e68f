package config

import (
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/redact"
)

// Load registers the password of a DATABASE_URL in either libpq form for
// redaction, so a text that holds it without the "password=" keyword (an
// echo of the value) is masked too.
func TestLoadRegistersPostgresPassword(t *testing.T) {
	for dsn, pw := range map[string]string{
		"host=127.0.0.1 user=riftflow password=kvSecret4711 dbname=riftflow": "kvSecret4711",
		"host=127.0.0.1 password='kv Secret 4712' dbname=riftflow":           "kv Secret 4712",
		"postgres://riftflow:urlSecret4713@127.0.0.1/riftflow":               "urlSecret4713",
	} {
		t.Setenv("DATABASE_URL", dsn)
		if _, err := Load(); err != nil {
			t.Fatal(err)
		}
		if got := redact.String("auth failed for " + pw); strings.Contains(got, pw) {
			t.Errorf("%q not registered: %q", pw, got)
		}
	}
}
