package store_test

import (
	"strings"
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/store"
)

// The pool is as large as DATABASE_POOL_MAX_CONNS says (store.MaxConns),
// not pgx's max(4, NumCPU); a pool_max_conns in the URL still wins.
func TestOpenMaxConns(t *testing.T) {
	url := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, c := range []struct {
		name string
		url  string
		opts []store.Option
		want int32
	}{
		{"option", url, []store.Option{store.MaxConns(3)}, 3},
		{"url wins", url + sep + "pool_max_conns=2", []store.Option{store.MaxConns(3)}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Open(t.Context(), c.url, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := store.PoolOf(s).Config().MaxConns; got != c.want {
				t.Errorf("MaxConns = %d, want %d", got, c.want)
			}
		})
	}
}
