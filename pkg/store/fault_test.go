package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riftflow/riftflow/internal/freeport"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/store"
)

// classifiedKind is the kind of the *fault.Error in err's chain, which is
// what fault.KindOf (and so the settle policy) reads; ok is false when
// nothing classified err (fault.KindOf would then say Transient by
// default, which proves nothing).
func classifiedKind(err error) (k fault.Kind, ok bool) {
	var fe *fault.Error
	if !errors.As(err, &fe) {
		return fault.Transient, false
	}
	return fe.Kind, true
}

// A Store method's error carries its fault.Kind: a caller that only adds
// context (%w) hands the settle policy the right kind through
// fault.KindOf, with no classifier of its own, while the pgconn error, its
// SQLSTATE in the message and the store's sentinel errors stay reachable.
func TestErrorsClassifiedAtTheBoundary(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	sep := "?"
	if strings.Contains(s.url, "?") {
		sep = "&"
	}

	// A statement timeout (57014): Accounts waits on a table the test
	// holds locked, on a store whose statement_timeout is 300 ms.
	short, err := store.Open(ctx, s.url+sep+"statement_timeout=300")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(short.Close)
	lock, err := s.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	_, timeoutErr := short.Accounts(ctx)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	tok := store.TokenRow{ID: "tok-1", Name: "t", Scopes: []string{"read"}, SHA256: make([]byte, 32)}
	if _, err := s.InsertToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	_, uniqueErr := s.InsertToken(ctx, tok)

	closed, err := store.Open(ctx, s.url)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	_, closedErr := closed.Accounts(ctx)

	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	refusedURL := "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable&connect_timeout=5"
	refused, err := store.Dial(refusedURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(refused.Close)
	_, refusedErr := refused.Accounts(ctx)
	_, openErr := store.Open(ctx, refusedURL)

	_, notFoundErr := s.TokenByID(ctx, "no-such-token")

	for _, c := range []struct {
		name     string
		err      error
		want     fault.Kind
		sqlstate string // the *pgconn.PgError's code, when Postgres answered
		is       error  // a sentinel errors.Is still finds
	}{
		{"NUL byte in text", s.UpsertAccount(ctx, store.Account{PUUID: "p-nul", GameName: "a\x00b", Platform: "na1", Region: "americas"}),
			fault.Invalid, "22021", nil},
		{"unique violation", uniqueErr, fault.Invalid, "23505", nil},
		{"statement timeout", timeoutErr, fault.Transient, "57014", nil},
		{"closed pool", closedErr, fault.Transient, "", nil},
		{"connection refused", refusedErr, fault.Transient, "", nil},
		{"connection refused at Open", openErr, fault.Transient, "", nil},
		{"not found", notFoundErr, fault.Transient, "", store.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil {
				t.Fatal("no error")
			}
			err := fmt.Errorf("caller: %w", c.err)
			if k, ok := classifiedKind(err); !ok || k != c.want {
				t.Errorf("%v: classified %v as %v, want classified as %v", err, ok, k, c.want)
			}
			if k := fault.KindOf(err); k != c.want {
				t.Errorf("fault.KindOf(%v) = %v, want %v", err, k, c.want)
			}
			var pgErr *pgconn.PgError
			if c.sqlstate != "" && (!errors.As(err, &pgErr) || pgErr.Code != c.sqlstate) {
				t.Errorf("%v: no *pgconn.PgError with code %s in the chain", err, c.sqlstate)
			}
			if c.sqlstate != "" && !strings.Contains(err.Error(), "SQLSTATE "+c.sqlstate) {
				t.Errorf("message %q does not name SQLSTATE %s", err, c.sqlstate)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("%v: errors.Is(err, %v) is false", err, c.is)
			}
		})
	}
}

// Every exported Store method that returns an error classifies it: called
// on a closed store, each one fails with a Transient *fault.Error (the
// closed pool), except those that, given zero arguments, have nothing to
// do and never reach the pool (noWork).
func TestEveryMethodClassifies(t *testing.T) {
	noWork := map[string]bool{
		"CapFailedJobs":     true, // keep 0: no cap
		"ReopenUnfetchable": true, // an empty filter selects nothing
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStore(t)
	closed, err := store.Open(ctx, s.url)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	ctxType := reflect.TypeFor[context.Context]()
	errType := reflect.TypeFor[error]()
	v := reflect.ValueOf(closed)
	var nilErr []string
	checked := 0
	for i := range v.NumMethod() {
		m, mt := v.Type().Method(i), v.Method(i).Type()
		if mt.NumOut() == 0 || mt.Out(mt.NumOut()-1) != errType {
			continue
		}
		args := make([]reflect.Value, mt.NumIn())
		for j := range args {
			if in := mt.In(j); in == ctxType {
				args[j] = reflect.ValueOf(ctx)
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		out := v.Method(i).Call(args)
		err, _ := out[len(out)-1].Interface().(error)
		if err == nil {
			nilErr = append(nilErr, m.Name)
			continue
		}
		checked++
		if k, ok := classifiedKind(err); !ok || k != fault.Transient {
			t.Errorf("%s on a closed store: %v (classified %v, kind %v), want a Transient *fault.Error", m.Name, err, ok, k)
		}
	}
	sort.Strings(nilErr)
	for _, name := range nilErr {
		if !noWork[name] {
			t.Errorf("%s on a closed store returned no error: list it in noWork if zero arguments give it nothing to do", name)
		}
	}
	if checked == 0 {
		t.Fatal("no method checked")
	}
	t.Logf("%d methods fail classified on a closed store; %v have nothing to do", checked, nilErr)
}
