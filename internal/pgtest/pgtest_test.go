package pgtest_test

import (
	"testing"

	"github.com/riftflow/riftflow/internal/pgcluster"
	"github.com/riftflow/riftflow/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewDatabaseIsFreshMigratedAndDropped(t *testing.T) {
	var first, name string
	t.Run("create", func(t *testing.T) {
		first = pgtest.NewDatabase(t)
		name = pgtest.Query(t, first, "SELECT current_database()")
		if got := pgtest.Query(t, first, "SELECT count(*)::text FROM information_schema.tables WHERE table_name IN "+
			"('accounts','matches','match_participants','match_timelines','match_fetches','sync_matches','jobs',"+
			"'league_entries','weekly_reports','visible_matches')"); got != "10" {
			t.Errorf("migrated tables = %s, want 10", got)
		}
		second := pgtest.NewDatabase(t)
		if n2 := pgtest.Query(t, second, "SELECT current_database()"); n2 == name {
			t.Errorf("two NewDatabase calls returned the same database %s", name)
		}
	})
	admin, err := pgcluster.DatabaseURL(first, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	if got := pgtest.Query(t, admin, "SELECT count(*)::text FROM pg_database WHERE datname = '"+name+"'"); got != "0" {
		t.Errorf("database %s still exists after cleanup", name)
	}
}
