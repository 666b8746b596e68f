package deploy

// The JSON schemas in schemas/ are generated; see internal/schemagen for
// where each comes from and which version.
//go:generate go run ./internal/schemagen -out schemas
