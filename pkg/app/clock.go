package app

import "time"

// processClock is the clock Build gives every service (Infra.Now) and the
// Riot rate limiter (ratelimit.Options.Now). It is time.Now in every
// production build; binaries built with the chaosclock tag (the chaos
// suite's, see clock_skew.go) shift it by RIFTFLOW_TEST_CLOCK_SKEW to
// inject clock skew between processes.
var processClock = time.Now
