package riftflow

// The client side of the HTTP API in the CLI's tests: package apitest;
// servers of the API on a stack are stacktest's (APIServer).

import (
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
)

var (
	call          = apitest.Call
	jsonCall      = apitest.JSONCall
	sseEvents     = apitest.SSEEvents
	getFrom       = apitest.Get
	freeAddr      = apitest.FreeAddr
	serveLoopback = apitest.ServeLoopback
)
