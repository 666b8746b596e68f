// Package app is the lifecycle of a riftflow process, and only that: Start
// (version flag, environment, logger, a context cancelled by SIGINT or
// SIGTERM), the Process every stage runs on (OpenTelemetry, the ops HTTP
// server's /healthz, /readyz and /metrics, the NATS connection, the pause
// switch), Run (the stage until ctx ends, then SHUTDOWN_TIMEOUT to drain)
// and Exit. A service's main is one line:
//
//	func main() { app.Main("resolver", resolver.Connect) }
//
// where the stage's constructor opens what else it uses: Postgres
// (store.Connect) and the Riot client (pkg/riotclient) are not linked into
// a binary whose stage does not use them.
package app
