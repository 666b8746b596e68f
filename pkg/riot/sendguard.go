package riot

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
)

// ErrGrantExpired is wrapped by the transport error of a request that was
// not sent because its rate-limit grant's send deadline had passed when it
// reached the HTTP transport (Permit.Send returned false). The Client never
// returns it: it acquires a new permit and sends the request on that one.
var ErrGrantExpired = errors.New("riot: rate-limit grant expired before the request was sent")

type permitKey struct{}

// withPermit carries p to the transport (sendGuard) in the request's ctx.
func withPermit(ctx context.Context, p Permit) context.Context {
	return context.WithValue(ctx, permitKey{}, p)
}

// sendGuard is the outermost http.RoundTripper of a Client: it checks the
// request's grant (Permit.Send) immediately before handing the request to
// the transport that writes it, and refuses to send on an expired grant.
// It reports the write (Permit.Written) through httptrace, so the limiter
// can measure how long a checked request takes to reach the wire.
type sendGuard struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (g sendGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	next := g.next
	if next == nil {
		next = http.DefaultTransport
	}
	p, _ := r.Context().Value(permitKey{}).(Permit)
	if p == nil {
		return next.RoundTrip(r)
	}
	if !p.Send() {
		return nil, ErrGrantExpired
	}
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { p.Written() },
	})
	return next.RoundTrip(r.WithContext(ctx))
}
