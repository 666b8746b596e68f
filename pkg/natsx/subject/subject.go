// Package subject matches NATS subjects against subject filters. It
// imports nothing of riftflow's, so both pkg/natsx and streams/ (the
// permission table) can use it without an import cycle.
package subject

import "strings"

// Matches reports whether subject (no wildcards) is matched by filter,
// which may hold "*" (one token) and a final ">" (one or more).
func Matches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return i == len(ft)-1 && len(st) > i
		}
		if i >= len(st) || f != "*" && f != st[i] {
			return false
		}
	}
	return len(ft) == len(st)
}
