package redact

import "testing"

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
