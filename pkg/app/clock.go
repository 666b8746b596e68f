package app

import "time"

// processClock is the clock NewProcess gives every service (Process.Now) and the
// Riot rate limiter (ratelimit.Options.Now). It is time.Now in every
// production build; binaries built with the chaosclock tag (the chaos
// suite's, see clock_skew.go) shift it by RIFTFLOW_TEST_CLOCK_SKEW to
// inject clock skew between processes.
var processClock = time.Now

// HostClock is this host's clock as NewProcess measures it against the NATS
// server's (processClock: time.Now, or skewed in a chaosclock build). A
// service moves its Now by the server's offset from HostClock
// (natsx.ServerOffset) where its times meet the server's: Now may be a
// clock set apart from the host's (the demo's recorded dates), which the
// offset then leaves where it is.
func HostClock() time.Time { return processClock() }
