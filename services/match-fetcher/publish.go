package matchfetcher

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/natsx"
)

// DefaultPublishPatience is how long a fetcher holding a fetched payload
// keeps trying to publish its result before it gives the command back.
const DefaultPublishPatience = 30 * time.Second

// publishHeld runs publish (the FetchResult of a payload Riot has already
// served) and, while it fails (FETCHED without quorum, NATS unreachable),
// runs it again with a backoff from 250 ms doubling to 5 s for up to
// Config.PublishPatience, telling JetStream the command is still in
// progress between tries. Giving the command back instead would make its
// next delivery call Riot again for a payload already in hand. It returns
// the last error when patience or ctx runs out. The result keeps its
// Nats-Msg-Id across tries, so a try that landed unseen is deduplicated.
func (s *Service) publishHeld(ctx context.Context, d natsx.Delivery, publish func() error) error {
	err := publish()
	if err == nil {
		return nil
	}
	deadline := time.Now().Add(s.cfg.PublishPatience)
	for delay := 250 * time.Millisecond; time.Now().Before(deadline); delay = min(2*delay, 5*time.Second) {
		_ = d.InProgress()
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		if err = publish(); err == nil {
			return nil
		}
	}
	return err
}
