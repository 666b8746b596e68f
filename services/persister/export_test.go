package persister

import "github.com/riftflow/riftflow/pkg/bus"

// SetDecodeHook makes every decode call f first (a fault injector for
// tests); nil removes it.
func SetDecodeHook(f func(bus.FetchResult)) { decodeHook = f }
