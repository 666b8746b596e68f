package sim

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/riftflow/riftflow/pkg/riot"
)

func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func newRequest(method, path, body string) *http.Request {
	return httptest.NewRequest(method, path, strings.NewReader(body))
}

func serve(s *Sim, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

func parseID(id string) (string, string, error) {
	p, r, err := riot.ParseMatchID(id)
	return string(p), string(r), err
}

// timelineHead is the part of a TimelineDto the tests check.
type timelineHead struct {
	Metadata struct {
		MatchID      string
		Participants []string
	} `json:"metadata"`
	Info struct {
		GameID       int64 `json:"gameId"`
		Participants []struct {
			ParticipantID int
			PUUID         string
		}
		Frames []struct {
			Events []struct{ RealTimestamp int64 }
		}
	} `json:"info"`
}
