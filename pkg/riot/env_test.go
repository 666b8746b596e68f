package riot

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
)

func TestEnvConfig(t *testing.T) {
	t.Setenv("RIOT_API_KEY", testKey)
	t.Setenv("RIOT_API_BASE_URL", "http://127.0.0.1:9/{route}")
	t.Setenv("RIOT_HTTP_TIMEOUT_MS", "2500")
	var e EnvConfig
	if err := env.Parse(&e); err != nil {
		t.Fatal(err)
	}
	cfg := e.Config()
	if cfg.APIKey != testKey || cfg.BaseURL != "http://127.0.0.1:9/{route}" || cfg.Timeout != 2500*time.Millisecond {
		t.Errorf("Config() = %+v", cfg)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "riot", e)
	if strings.Contains(buf.String(), testKey) || !strings.Contains(buf.String(), "riot.api_key_set=true") {
		t.Errorf("log = %s", buf.String())
	}

	t.Setenv("RIOT_API_BASE_URL", "")
	t.Setenv("RIOT_HTTP_TIMEOUT_MS", "")
	var d EnvConfig
	if err := env.Parse(&d); err != nil {
		t.Fatal(err)
	}
	if d.BaseURL != DefaultBaseURL || d.TimeoutMS != 10000 {
		t.Errorf("defaults = %+v", d)
	}
}
