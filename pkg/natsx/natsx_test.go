package natsx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/natstest"
)

// spans records every span ended in this test binary.
var spans = tracetest.NewSpanRecorder()

func TestMain(m *testing.M) {
	// Tests install an SDK provider to observe spans; library code never does.
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	os.Exit(m.Run())
}

// startJS starts an in-process JetStream server and returns a JetStream
// handle on an in-process connection.
func startJS(t *testing.T) (*server.Server, *nats.Conn, jetstream.JetStream) {
	return natstest.JetStream(t)
}

func TestConnectUserPassword(t *testing.T) {
	s, err := natsembed.StartServer(natsembed.Options{StoreDir: t.TempDir(), NoLog: true, Configure: func(o *server.Options) {
		o.Username, o.Password = "svc", "s3cret"
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()

	nc, err := Connect(t.Context(), ConnConfig{URL: s.ClientURL(), Name: "auth", User: "svc", Password: "s3cret"})
	if err != nil {
		t.Fatalf("good credentials: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	if nc, err := Connect(t.Context(), ConnConfig{URL: s.ClientURL(), User: "svc", Password: "wrong"}); err == nil {
		nc.Close()
		t.Fatal("wrong password: connected")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("wrong password: err = %v, want nats.ErrAuthorization", err)
	}
}

func TestConnectTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := natsembed.StartServer(natsembed.Options{StoreDir: t.TempDir(), NoLog: true, Configure: func(o *server.Options) {
		o.TLS = true
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	url := "tls://" + s.Addr().String()

	nc, err := Connect(t.Context(), ConnConfig{URL: url, TLSCAFile: certFile})
	if err != nil {
		t.Fatalf("with CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection does not report TLS")
	}
	nc.Close()

	if nc, err := Connect(t.Context(), ConnConfig{URL: url}); err == nil {
		nc.Close()
		t.Fatal("without the CA the self-signed server was trusted")
	}
}

// writeSelfSigned writes a self-signed ECDSA certificate for 127.0.0.1
// (also its own CA) and its key as PEM files in dir.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "riftflow-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert, key := natstest.Issue(t, tmpl, nil, nil)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestConnConfigFromEnv(t *testing.T) {
	t.Setenv("NATS_URL", "nats://a:4222,nats://b:4222")
	t.Setenv("NATS_USER", "u")
	t.Setenv("NATS_PASSWORD", "p")
	t.Setenv("NATS_TLS_CA", "/ca.pem")
	c := ConnConfigFromEnv()
	if c.URL != "nats://a:4222,nats://b:4222" || c.User != "u" || c.Password != "p" || c.TLSCAFile != "/ca.pem" || c.Token != "" {
		t.Fatalf("got %+v", c)
	}
	if s := c.String(); !strings.Contains(s, `password="***"`) || strings.Contains(s, `"p"`) {
		t.Fatalf("String leaks or misses the password: %s", s)
	}
}

func TestHeaderCarrierKeepsCase(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "parent")
	defer span.End()
	h := nats.Header{}
	Inject(ctx, h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no lowercase traceparent header: %v", h)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if !got.IsValid() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("extracted %v, want %v", got, span.SpanContext())
	}
}

func TestPublishInjectsProducerSpan(t *testing.T) {
	_, _, js := startJS(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}}); err != nil {
		t.Fatal(err)
	}
	ack, err := Publish(ctx, js, "p.one", map[string]int{"n": 1}, jetstream.WithMsgID("id-1"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := js.Stream(ctx, "P")
	raw, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw.Data) != `{"n":1}` {
		t.Errorf("data = %s", raw.Data)
	}
	sc := trace.SpanContextFromContext(Extract(context.Background(), raw.Header))
	var producer sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanContext().SpanID() == sc.SpanID() {
			producer = s
		}
	}
	if producer == nil {
		t.Fatalf("no ended span matches the injected traceparent %q", raw.Header.Get("traceparent"))
	}
	if producer.SpanKind() != trace.SpanKindProducer || producer.Name() != "send P" {
		t.Errorf("span %q kind %v", producer.Name(), producer.SpanKind())
	}
	attrs := map[string]string{}
	for _, a := range producer.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["messaging.system"] != "nats" || attrs["messaging.destination.name"] != "p.one" || attrs["messaging.message.id"] != "id-1" {
		t.Errorf("attributes %v", attrs)
	}
}

func TestScheduleDeliversWithHeadersNotDeduped(t *testing.T) {
	_, _, js := startJS(t)
	ctx := t.Context()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FETCH", Subjects: []string{"lol.match.fetch.>", "lol.match.retry.>"},
		Retention: jetstream.WorkQueuePolicy, AllowMsgSchedules: true, Duplicates: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "FETCH", jetstream.ConsumerConfig{Durable: "f", FilterSubject: "lol.match.fetch.americas"})
	if err != nil {
		t.Fatal(err)
	}
	// The original fetch, with the match id as Nats-Msg-Id, handled and acked.
	if _, err := js.Publish(ctx, "lol.match.fetch.americas", []byte("attempt1"), jetstream.WithMsgID("NA1_1")); err != nil {
		t.Fatal(err)
	}
	first, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}

	// The retry: fresh trace context, its own msg id, due in one second.
	sctx, span := otel.Tracer("test").Start(ctx, "fetch NA1_1")
	span.End()
	retry := nats.NewMsg("")
	retry.Data = []byte("attempt2")
	retry.Header.Set(jetstream.MsgIDHeader, "NA1_1/match/a2")
	retry.Header.Set("Riftflow-Attempt", "2")
	if err := Schedule(sctx, js, retry, time.Now().Add(time.Second), "lol.match.retry.americas.NA1_1-a2", "lol.match.fetch.americas"); err != nil {
		t.Fatal(err)
	}
	// Scheduling the same retry again (a handler re-run) is deduplicated.
	if err := Schedule(sctx, js, retry, time.Now().Add(time.Second), "lol.match.retry.americas.NA1_1-a2", "lol.match.fetch.americas"); !errors.Is(err, ErrScheduleDuplicate) {
		t.Fatalf("repeated schedule: %v, want ErrScheduleDuplicate", err)
	}
	// Reusing the original's id would swallow the retry: Schedule says so.
	bad := nats.NewMsg("")
	bad.Header.Set(jetstream.MsgIDHeader, "NA1_1")
	if err := Schedule(sctx, js, bad, time.Now(), "lol.match.retry.americas.NA1_1-bad", "lol.match.fetch.americas"); !errors.Is(err, ErrScheduleDuplicate) {
		t.Fatalf("schedule with the original id: %v, want ErrScheduleDuplicate", err)
	}

	m, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
	if err != nil {
		t.Fatalf("scheduled retry never arrived: %v", err)
	}
	defer m.Ack()
	h := m.Headers()
	if string(m.Data()) != "attempt2" || h.Get("Riftflow-Attempt") != "2" {
		t.Errorf("delivered %q headers %v", m.Data(), h)
	}
	if got := trace.SpanContextFromContext(Extract(ctx, h)); got.TraceID() != span.SpanContext().TraceID() {
		t.Errorf("traceparent %q does not continue trace %s", h.Get("traceparent"), span.SpanContext().TraceID())
	}
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		t.Errorf("delivered retry carries Nats-Msg-Id %q; the server should strip it", id)
	}
	if h.Get("Nats-Scheduler") != "lol.match.retry.americas.NA1_1-a2" {
		t.Errorf("Nats-Scheduler = %q", h.Get("Nats-Scheduler"))
	}
	t.Logf("delivered headers: %v", h)
}

// A NATS_URL with user:password@ never shows its password in an error.
func TestConnectErrorRedactsPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := Connect(ctx, ConnConfig{Name: "test", URL: "nats://svc:topsecret99@127.0.0.1:1"})
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "topsecret99") || !strings.Contains(err.Error(), "svc:xxxxx@") {
		t.Fatalf("error %q shows the password or no redacted URL", err)
	}
}
