package sim

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An answer the simulator sends after its client has given up on the
// request counts as a failed call in PerMatch, as the client saw it: a
// client timeout on an answer that came late for any reason (here the
// simulator held back, as on a starved host; not only a Slow fault). A
// 200 the client reads is a call that succeeded.
func TestPerMatchCountsAnAnswerTheClientGaveUpOn(t *testing.T) {
	s, _ := newSim(t, Options{})
	const id = "NA1_5027407435"
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := strings.Replace(base, "{route}", "americas", 1) + "/lol/match/v5/matches/" + id
	call := func(c *http.Client) error {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Riot-Token", testKey)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	s.mu.Lock() // every request waits for it before it is answered
	err = call(&http.Client{Timeout: 100 * time.Millisecond})
	time.Sleep(200 * time.Millisecond) // the server sees the client's close
	s.mu.Unlock()
	if err == nil {
		t.Fatal("the held-back request did not time out")
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().PerMatch[id].Match == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := s.Stats().PerMatch[id]; c.Match != 1 || c.MatchFailed != 1 {
		t.Fatalf("after a client timeout: %+v, want 1 getMatch call, failed", c)
	}
	if err := call(http.DefaultClient); err != nil {
		t.Fatal(err)
	}
	if c := s.Stats().PerMatch[id]; c.Match != 2 || c.MatchFailed != 1 {
		t.Fatalf("after a call answered: %+v, want 2 getMatch calls, 1 failed", c)
	}
}
