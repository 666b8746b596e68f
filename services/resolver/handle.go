package resolver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
)

// Handle processes one lol.ingest.request message and says how to settle
// it: Ack, or the failure handle returned, settled by its kind.
func (s *Service) Handle(ctx context.Context, d natsx.Delivery) natsx.Result {
	return natsx.Fail(s.handle(ctx, d))
}

// handle resolves the request d carries and publishes its sync command; a
// refused request's error is Invalid or Gone (reject), a failure to retry
// is Transient or RateLimited.
func (s *Service) handle(ctx context.Context, d natsx.Delivery) error {
	log := s.d.Logger
	req, err := bus.DecodeIngestRequest(d.Data)
	if err != nil {
		return s.reject(ctx, d, "", 400, err)
	}
	if req.RequestID == "" && d.Sequence > 0 {
		// Deterministic across redeliveries: the stream sequence.
		req.RequestID = bus.StoredRequestID(d.Stored, d.Sequence)
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("riftflow.request_id", req.RequestID))
	if req.Priority == bus.Background {
		ctx = riot.WithBackground(ctx) // interactive lookups go first
	}

	// Validated by Decode; "" when the request named no platform: the
	// player's active one is looked up below.
	platform, _ := riot.ParsePlatform(req.Platform)
	cmd := bus.SyncCommand{
		RequestID: req.RequestID, PUUID: req.PUUID, Platform: string(platform),
		Region: string(platform.Region()), Mode: req.Mode, Count: req.Count, Lookback: req.LookbackDays,
		Queue: req.Queue, Type: req.Type, Priority: req.Priority, Trigger: req.Trigger,
		Requested: req.RequestedAt, Force: req.Force, RequestedBy: req.RequestedBy,
	}
	if cmd.Count == 0 {
		cmd.Count = s.cfg.MaxMatchesPerRun
	}
	if cmd.Lookback == 0 {
		cmd.Lookback = s.cfg.LookbackDays
	}
	if cmd.Requested.IsZero() {
		cmd.Requested = s.d.Now()
	}
	if req.RiotID != "" {
		id, _ := riot.ParseRiotID(req.RiotID)
		cmd.GameName, cmd.TagLine = id.GameName, id.TagLine
		puuid, err := s.resolve(ctx, s.accountRegion(platform), id)
		if err != nil {
			return s.lookupFailed(ctx, d, req.RequestID, fmt.Errorf("no Riot account %q", id.String()), err)
		}
		cmd.PUUID = puuid
	}
	if platform == "" {
		found, err := s.activePlatform(ctx, cmd.PUUID)
		if err != nil {
			return s.lookupFailed(ctx, d, req.RequestID,
				fmt.Errorf("no League platform known to Riot for PUUID %s; give platform", cmd.PUUID), err)
		}
		platform, cmd.PlatformFound = found, true
		cmd.Platform, cmd.Region = string(found), string(found.Region())
		log.InfoContext(ctx, "platform found through account-v1", "request_id", req.RequestID, "puuid", cmd.PUUID, "platform", cmd.Platform)
	}
	if req.RiotID == "" {
		s.refreshRiotID(ctx, platform, &cmd)
	}
	span.SetAttributes(attribute.String("riot.puuid", cmd.PUUID), attribute.String("riot.region", cmd.Region))
	if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.SyncFor(cmd.Platform, cmd.Priority), cmd, jetstream.WithMsgID(bus.SyncMsgID(cmd.RequestID))); err != nil {
		log.WarnContext(ctx, "publish sync command failed, will retry", "err", err)
		return fault.Wrap(fault.Transient, fmt.Errorf("publish sync command: %w", err))
	}
	log.InfoContext(ctx, "sync requested", "request_id", cmd.RequestID, "puuid", cmd.PUUID, "platform", cmd.Platform, "mode", cmd.Mode, "count", cmd.Count)
	return nil
}

// lookupFailed is the error that settles a request whose account-v1
// lookup failed with err: an unknown player is rejected (404, with
// notFound as the reason), a PUUID Riot cannot decrypt too (400); a
// retryable failure or a rejected key is retried, or rejected (503) on the
// consumer's last delivery; anything else is rejected (502).
func (s *Service) lookupFailed(ctx context.Context, d natsx.Delivery, requestID string, notFound, err error) error {
	log := s.d.Logger
	var re *riot.Error
	switch {
	case errors.As(err, &re) && re.Kind == riot.KindNotFound:
		return s.reject(ctx, d, requestID, 404, notFound)
	case errors.As(err, &re) && re.Kind == riot.KindBadRequest:
		return s.reject(ctx, d, requestID, 400, fmt.Errorf("account lookup: %w", err))
	case errors.As(err, &re) && (re.Retryable() || re.Kind == riot.KindKeyRejected) && d.Last:
		// A nak now would end in a MAX_DELIVERIES advisory and the
		// request would vanish: refuse it with the reason instead.
		return s.reject(ctx, d, requestID, 503,
			fmt.Errorf("account lookup failed %d times, giving up: %w", d.Num, err))
	case errors.As(err, &re) && re.Retryable():
		// The settle policy backs off per delivery from RetryDelay;
		// never sooner than a Retry-After (on the runner's clock).
		log.WarnContext(ctx, "account lookup failed, will retry", "request_id", requestID, "err", err)
		return fault.RetryAt(err, time.Now().Add(re.RetryDelay(s.d.Now(), 0)))
	case errors.As(err, &re) && re.Kind == riot.KindKeyRejected:
		// The key is unusable: keep the request, don't hammer Riot.
		log.ErrorContext(ctx, "Riot API key rejected; request parked", "request_id", requestID)
		return fault.RetryAt(err, time.Now().Add(time.Minute))
	case ctx.Err() != nil:
		return fault.Wrap(fault.Transient, err)
	default:
		return s.reject(ctx, d, requestID, 502, fmt.Errorf("account lookup: %w", err))
	}
}

// resolve returns the PUUID for id, from the riot-ids cache or account-v1
// on region.
func (s *Service) resolve(ctx context.Context, region riot.Region, id riot.RiotID) (string, error) {
	key := CacheKey(id)
	if e, err := s.d.RiotIDs.Get(ctx, key); err == nil && len(e.Value()) > 0 {
		return string(e.Value()), nil
	}
	acc, err := s.d.Riot.AccountByRiotID(ctx, region, id)
	if err != nil {
		return "", err
	}
	if acc.PUUID == "" {
		return "", &riot.Error{Kind: riot.KindDecode, Op: "account-v1.getByRiotId", Msg: "account without puuid"}
	}
	if _, err := s.d.RiotIDs.Put(ctx, key, []byte(acc.PUUID)); err != nil {
		s.d.Logger.WarnContext(ctx, "riot-ids cache write failed", "err", err)
	}
	return acc.PUUID, nil
}

// accountRegion is the account-v1 routing value for a request on platform
// p, or, for a request without one, the configured AccountRegion: every
// account-v1 cluster knows every account.
func (s *Service) accountRegion(p riot.Platform) riot.Region {
	if p == "" {
		return s.cfg.AccountRegion
	}
	return p.AccountRegion()
}

// PlatformCacheKey is the riot-ids KV key under which the resolver keeps a
// PUUID's active platform ("platform.<puuid>"; the Riot ID keys are hashes
// without dots, CacheKey).
func PlatformCacheKey(puuid string) string { return "platform." + puuid }

// activePlatform returns the platform puuid last played League on, from
// the riot-ids cache (1 day, like a Riot ID) or account-v1 getActiveRegion
// on the configured AccountRegion, and caches what it learned.
func (s *Service) activePlatform(ctx context.Context, puuid string) (riot.Platform, error) {
	key := PlatformCacheKey(puuid)
	if e, err := s.d.RiotIDs.Get(ctx, key); err == nil {
		if p, perr := riot.ParsePlatform(string(e.Value())); perr == nil {
			return p, nil
		}
	}
	p, err := s.d.Riot.ActiveRegion(ctx, s.cfg.AccountRegion, puuid)
	if err != nil {
		return "", err
	}
	if _, err := s.d.RiotIDs.Put(ctx, key, []byte(p)); err != nil {
		s.d.Logger.WarnContext(ctx, "riot-ids cache write failed", "err", err)
	}
	return p, nil
}

// refreshRiotID looks a request by PUUID up by PUUID (account-v1
// by-puuid) so the sync stores the player's current Riot ID: players rename
// themselves, and every sync (the hourly scheduled ones included) brings
// the stored name up to date. The riot-ids cache learns the new name. A
// failed lookup is logged and the sync goes on with the stored name.
func (s *Service) refreshRiotID(ctx context.Context, p riot.Platform, cmd *bus.SyncCommand) {
	acc, err := s.d.Riot.AccountByPUUID(ctx, p.AccountRegion(), cmd.PUUID)
	if err != nil || acc.GameName == "" {
		s.d.Logger.WarnContext(ctx, "Riot ID refresh by PUUID failed; the stored one is kept", "puuid", cmd.PUUID, "err", err)
		return
	}
	cmd.GameName, cmd.TagLine = acc.GameName, acc.TagLine
	key := CacheKey(riot.RiotID{GameName: acc.GameName, TagLine: acc.TagLine})
	if _, err := s.d.RiotIDs.Put(ctx, key, []byte(cmd.PUUID)); err != nil {
		s.d.Logger.WarnContext(ctx, "riot-ids cache write failed", "err", err)
	}
}

// CacheKey is the riot-ids KV key for a Riot ID: Riot IDs hold spaces and
// unicode, which KV keys cannot, so the normalised ID is hashed (SHA-256,
// base64url). Riot IDs are case-insensitive; so is the key.
func CacheKey(id riot.RiotID) string {
	sum := sha256.Sum256([]byte(id.Key()))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
