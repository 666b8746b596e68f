package riotclient

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/streamstest"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/riot"
)

// TestCeilingsAcrossProcesses: RIOT_MAX_PER_MINUTE=3 caps the key, not
// each process (design 002's BULLMQ_GLOBAL_RATE). Two Riot clients built
// as two services build them (New), each on its own NATS connection,
// share the ratelimit KV bucket: together they send 3 requests within a
// minute, and every later call is refused as rate-limited without being
// sent. Per-process ceilings sent 3 each.
func TestCeilingsAcrossProcesses(t *testing.T) {
	t.Setenv("RIOT_MAX_PER_MINUTE", "3")
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := hits.Add(1)
		w.Header().Set("X-App-Rate-Limit", "100:10")
		w.Header().Set("X-App-Rate-Limit-Count", strconv.FormatInt(n, 10)+":10")
		w.Header().Set("X-Method-Rate-Limit", "100:10")
		_, _ = w.Write([]byte("[]"))
	}))
	t.Cleanup(srv.Close)
	s := natstest.Server(t)
	cfg := config.Riot{APIKey: "RGAPI-ceiling-test", BaseURL: srv.URL + "/{route}", TimeoutMS: 2000,
		RateLimitMaxWait: 200 * time.Millisecond, SharedRateLimit: true, BackoffStart: time.Second, BackoffMax: time.Minute,
		BreakerTimeout: time.Second}
	log := slog.New(slog.DiscardHandler)
	var clients []*riot.Client
	for i := range 2 {
		_, js := natstest.Connect(t, s)
		if i == 0 {
			streamstest.Bucket(t, js, "ratelimit")
		}
		c, _, _, err := New(t.Context(), cfg, js, log)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	sent, refused := 0, 0
	for i := range 8 {
		_, err := clients[i%2].MatchIDsByPUUID(t.Context(), "americas", "puuid", riot.MatchIDsQuery{})
		var re *riot.Error
		switch {
		case err == nil:
			sent++
		case errors.As(err, &re) && re.Kind == riot.KindRateLimited && re.Status == 0:
			refused++
		default:
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if hits.Load() != 3 || sent != 3 || refused != 5 {
		t.Fatalf("Riot saw %d requests (%d calls answered, %d refused) from two processes under RIOT_MAX_PER_MINUTE=3, want 3 (3, 5)", hits.Load(), sent, refused)
	}
}
