// Package redact removes secrets from text before it leaves the process:
// log lines, error messages, health reports.
//
// It removes five things: Riot API keys ("RGAPI-" and a UUID), riftflow
// API tokens ("rft_<id>_<secret>", see docs/security.md), the
// password of any URL with user information ("nats://user:pw@host",
// "postgres://user:pw@host/db" become "…user:xxxxx@host…"), a libpq
// keyword/value password ("password=pw" becomes "password=xxxxx"), and every value
// registered with Register (the configured Riot key, NATS password and
// token, API tokens), whatever their format. riftflow's loggers
// (telemetry.NewLogger) pass every message and string value through String;
// errors that embed a URL use it too.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
)

// Masks used in place of what is removed.
const (
	MaskedRiotKey  = "RGAPI-****"
	MaskedAPIToken = "rft_****"
	MaskedPassword = "xxxxx"
	MaskedSecret   = "[redacted]"
)

var (
	riotKey  = regexp.MustCompile(`RGAPI-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}`)
	apiToken = regexp.MustCompile(`rft_[0-9a-f]{16}_[A-Za-z0-9_-]{43}`)
	userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^/@\s:,]*):([^/@\s,]*)@`)
	// kvPassword is a libpq keyword/value password: password=pw or
	// password='p w' (quotes escaped with a backslash inside).
	kvPassword = regexp.MustCompile(`(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']+)`)

	mu      sync.RWMutex
	secrets []string
)

// minSecretLen is the shortest value Register accepts: shorter ones would
// mask ordinary words.
const minSecretLen = 6

// Register adds secret values to remove from every String result. Values
// shorter than 6 bytes are ignored. It is safe for concurrent use.
func Register(values ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, v := range values {
		if len(v) < minSecretLen {
			continue
		}
		dup := false
		for _, s := range secrets {
			dup = dup || s == v
		}
		if !dup {
			secrets = append(secrets, v)
		}
	}
}

// String returns s with Riot API keys, API tokens, URL passwords and
// registered secrets masked.
func String(s string) string {
	if strings.Contains(s, "RGAPI-") {
		s = riotKey.ReplaceAllString(s, MaskedRiotKey)
	}
	if strings.Contains(s, "rft_") {
		s = apiToken.ReplaceAllString(s, MaskedAPIToken)
	}
	if strings.Contains(s, "@") && strings.Contains(s, "://") {
		s = userinfo.ReplaceAllString(s, "${1}:"+MaskedPassword+"@")
	}
	if strings.Contains(s, "password") {
		s = kvPassword.ReplaceAllString(s, "${1}"+MaskedPassword)
	}
	mu.RLock()
	defer mu.RUnlock()
	for _, v := range secrets {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, MaskedSecret)
		}
	}
	return s
}

// KeywordPassword is the password of a libpq keyword/value connection
// string ("host=db password=pw" or "password='p w'", unquoted and
// unescaped), or "" if it has none.
func KeywordPassword(dsn string) string {
	m := kvPassword.FindStringSubmatch(dsn)
	if m == nil {
		return ""
	}
	v := m[2]
	if strings.HasPrefix(v, "'") {
		v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v[1 : len(v)-1])
	}
	return v
}

// Panics, deferred first thing in main, prints a panic of the main
// goroutine and its stack through String, then exits with status 2 (as
// an unrecovered panic does), so a secret in a panic value never reaches
// the terminal or the container log. Panics of other goroutines are
// outside its reach: riftflow's message handlers recover their own
// (natsx) and log through a redacting logger.
func Panics(w io.Writer) {
	r := recover()
	if r == nil {
		return
	}
	fmt.Fprintf(w, "panic: %s\n\n%s", String(fmt.Sprint(r)), String(string(debug.Stack())))
	os.Exit(2)
}

// ShortHash is the first 16 hex digits of the SHA-256 of s: a short, stable
// name for a secret or a player that does not reveal it, and an id part
// that is the same on every replica.
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
