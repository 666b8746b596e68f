package riot

import (
	"log/slog"
	"time"
)

// EnvConfig is the part of Config that services read from the environment,
// with the names in docs and README.md. It carries caarlos0/env tags, so a service
// can embed it in its own env struct. Its LogValue masks the key.
type EnvConfig struct {
	// APIKey is RIOT_API_KEY. Empty means "no Riot access" (the service may
	// then run against the simulator).
	APIKey string `env:"RIOT_API_KEY"`
	// BaseURL is RIOT_API_BASE_URL, a template with {route}.
	BaseURL string `env:"RIOT_API_BASE_URL" envDefault:"https://{route}.api.riotgames.com"`
	// TimeoutMS is RIOT_HTTP_TIMEOUT_MS, the per-attempt timeout in milliseconds.
	TimeoutMS int `env:"RIOT_HTTP_TIMEOUT_MS" envDefault:"10000"`
}

// Config returns a Config with these values; the caller adds the Limiter
// and anything else before calling New.
func (e EnvConfig) Config() Config {
	return Config{APIKey: e.APIKey, BaseURL: e.BaseURL, Timeout: time.Duration(e.TimeoutMS) * time.Millisecond}
}

// LogValue implements slog.LogValuer, showing only whether a key is set.
func (e EnvConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("api_key_set", e.APIKey != ""),
		slog.String("base_url", e.BaseURL),
		slog.Int("timeout_ms", e.TimeoutMS),
	)
}
