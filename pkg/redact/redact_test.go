package redact

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	Register("s3cret-nats-token", "abc") // "abc" is too short to register
	for in, want := range map[string]string{
		"connect nats://svc:pa55word@nats-0:4222,nats://svc:pa55word@nats-1:4222: refused": "connect nats://svc:xxxxx@nats-0:4222,nats://svc:xxxxx@nats-1:4222: refused",
		"postgres://riftflow:hunter22@db:5432/riftflow?sslmode=require":                    "postgres://riftflow:xxxxx@db:5432/riftflow?sslmode=require",
		"key RGAPI-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f rejected":                          "key RGAPI-**** rejected",
		"token s3cret-nats-token in a message":                                             "token [redacted] in a message",
		"nats://host:4222 and mail@example.com stay":                                       "nats://host:4222 and mail@example.com stay",
		"abc is a word": "abc is a word",
		"Authorization: Bearer rft_0123456789abcdef_" + "abcdefghijABCDEFGHIJ0123456789-_abcdefghijk": "Authorization: Bearer rft_****",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

// A panic of the main goroutine reaches stderr redacted, with exit status
// 2 (run in a child process, as Panics exits).
func TestPanics(t *testing.T) {
	if os.Getenv("REDACT_PANIC_CHILD") == "1" {
		Register("child-secret-value")
		defer Panics(os.Stderr)
		panic("connect postgres://u:pw123456@db/x with child-secret-value and RGAPI-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanics$")
	cmd.Env = append(os.Environ(), "REDACT_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("child: %v, want exit status 2\n%s", err, out)
	}
	if !strings.Contains(string(out), "panic: connect postgres://u:xxxxx@db/x") {
		t.Fatalf("no redacted panic in %s", out)
	}
	for _, s := range []string{"pw123456", "child-secret-value", "0a1b2c3d4e5f"} {
		if strings.Contains(string(out), s) {
			t.Errorf("%q in the panic output:\n%s", s, out)
		}
	}
}

// Issue 27 finding 10: a keyword/value DATABASE_URL's password is masked
// wherever it appears, quoted or not, and KeywordPassword finds it for
// Register.
func TestKeywordValuePassword(t *testing.T) {
	for _, c := range []struct{ dsn, pw, masked string }{
		{"host=db user=u password=s3cretpw dbname=x", "s3cretpw", "host=db user=u password=xxxxx dbname=x"},
		{"host=db password = 'p w\\'d' sslmode=disable", "p w'd", "host=db password = xxxxx sslmode=disable"},
		{"host=db user=u", "", "host=db user=u"},
	} {
		if got := KeywordPassword(c.dsn); got != c.pw {
			t.Errorf("KeywordPassword(%q) = %q, want %q", c.dsn, got, c.pw)
		}
		if got := String("connect " + c.dsn + ": refused"); got != "connect "+c.masked+": refused" {
			t.Errorf("String(%q) = %q", c.dsn, got)
		}
	}
}
