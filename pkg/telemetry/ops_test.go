package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/telemetry"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, path, nil))
	return rr.Code, rr.Body.String()
}

func TestReadyz(t *testing.T) {
	ops := telemetry.NewOps(nil)
	if code, _ := get(t, ops.Handler(), "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz with no checks = %d, want 200", code)
	}
	ops.AddCheck("nats", func(context.Context) error { return nil })
	ops.AddCheck("postgres", func(context.Context) error { return errors.New("connection refused") })
	ops.AddCheck("streams", func(context.Context) error { return errors.New("stream FETCH not found") })

	code, body := get(t, ops.Handler(), "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz = %d, want 503; body %s", code, body)
	}
	var st telemetry.ReadyStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(st.Failing, ","); got != "postgres,streams" {
		t.Errorf("failing = %q, want postgres,streams", got)
	}
	if st.Errors["postgres"] != "connection refused" {
		t.Errorf("errors[postgres] = %q", st.Errors["postgres"])
	}

	ops.AddCheck("postgres", func(context.Context) error { return nil })
	ops.AddCheck("streams", func(context.Context) error { return nil })
	if code, body := get(t, ops.Handler(), "/readyz"); code != http.StatusOK {
		t.Errorf("readyz after recovery = %d, want 200; body %s", code, body)
	}
	if code, _ := get(t, ops.Handler(), "/healthz"); code != http.StatusOK {
		t.Errorf("healthz = %d, want 200", code)
	}
}

func TestOpsMountsExtraHandlers(t *testing.T) {
	ops := telemetry.NewOps(nil)
	ops.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "api "+r.URL.Path)
	}))
	if code, body := get(t, ops.Handler(), "/v1/sync"); code != http.StatusOK || body != "api /v1/sync" {
		t.Errorf("GET /v1/sync = %d %q", code, body)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops := telemetry.NewOps(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ops.ServeListener(ctx, ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz = %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeListener after cancel = %v, want nil", err)
	}
}

// TestPprofOnlyWhenAsked: /debug/pprof/ is served only with DEBUG_PPROF=true.
func TestPprofOnlyWhenAsked(t *testing.T) {
	t.Setenv("DEBUG_PPROF", "")
	if code, _ := get(t, telemetry.NewOps(nil).Handler(), "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Fatalf("pprof without DEBUG_PPROF: %d, want 404", code)
	}
	t.Setenv("DEBUG_PPROF", "true")
	h := telemetry.NewOps(nil).Handler()
	if code, body := get(t, h, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Fatalf("pprof index with DEBUG_PPROF=true: %d", code)
	}
	if code, _ := get(t, h, "/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Fatalf("heap profile: %d", code)
	}
}
