package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// prepareTest builds a closed store of the running test's dialect at
// place (see DB), released when the test ends.
func prepareTest(t *testing.T, place string) *DB {
	t.Helper()
	var (
		db  *DB
		err error
	)
	switch dialectOf(t).name {
	case "sqlite":
		db, err = PrepareSQLite(place, SQLiteOptions{})
	case "postgres":
		db, err = PreparePostgres(place, PostgresOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// placeState describes everything at a place that a write would change:
// for SQLite every file in the database's directory (its -wal and -shm
// included) with a digest of its bytes, for PostgreSQL the tables and the
// applied migrations.
func placeState(t *testing.T, place string) string {
	t.Helper()
	if dialectOf(t).name == "sqlite" {
		entries, err := os.ReadDir(filepath.Dir(place))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(place), e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %x", e.Name(), sha256.Sum256(b)))
		}
		return strings.Join(out, ", ")
	}
	raw, err := sql.Open("pgx", place)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var tables, versions sql.NullString
	if err := raw.QueryRow(`SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(","+tables.String+",", ",schema_migrations,") {
		if err := raw.QueryRow(`SELECT string_agg(version || ':' || name, ',' ORDER BY version) FROM schema_migrations`).Scan(&versions); err != nil {
			t.Fatal(err)
		}
	}
	return tables.String + " | " + versions.String
}

// Checking a store (what caddy validate does) reads the database and
// writes nothing: no SQLite file, -wal or -shm is created, no table or
// migration is added, whether the place is empty, up to date, or newer
// than this binary, which Check refuses, naming both versions.
func TestCheckingAStoreWritesNothingAndRefusesANewerSchema(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		known := knownMigrations(t)
		for _, c := range []struct {
			name string
			// setup leaves the place as the case needs it.
			setup   func(t *testing.T, place string)
			wantErr string
		}{
			{"fresh place", func(*testing.T, string) {}, ""},
			{"up to date", func(t *testing.T, place string) { openAt(t, place).Close() }, ""},
			{"newer schema", func(t *testing.T, place string) {
				db := openAt(t, place)
				if _, err := rawW(db).ExecContext(context.Background(), `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, known+1); err != nil {
					t.Fatal(err)
				}
				db.Close()
			}, fmt.Sprintf("schema version %d, this binary knows up to %d", known+1, known)},
		} {
			t.Run(c.name, func(t *testing.T) {
				place := newPlace(t)
				c.setup(t, place)
				before := placeState(t, place)
				err := prepareTest(t, place).Check(context.Background())
				switch {
				case c.wantErr == "" && err != nil:
					t.Fatalf("check: %v", err)
				case c.wantErr != "" && (!errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), c.wantErr)):
					t.Fatalf("check: %v; want ErrSchemaTooNew saying %q", err, c.wantErr)
				}
				if after := placeState(t, place); after != before {
					t.Errorf("the check changed the database:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	})
}

// A prepared store makes no connection until it is opened: a read fails
// with ErrNotOpen, as a store that is not there yet (ErrUnavailable), and
// leaves the place as it was; Open then creates the schema.
func TestAPreparedStoreReadsNothingUntilItIsOpened(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		before := placeState(t, place)
		db := prepareTest(t, place)
		if _, err := db.CountJobs(ctx); !errors.Is(err, ErrNotOpen) || !IsUnavailable(err) {
			t.Fatalf("read before Open: %v; want ErrNotOpen and unavailable", err)
		}
		if after := placeState(t, place); after != before {
			t.Fatalf("a read before Open changed the database:\nbefore %s\nafter  %s", before, after)
		}
		if err := db.Open(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CountJobs(ctx); err != nil {
			t.Fatalf("read after Open: %v", err)
		}
		if state := placeState(t, place); dialectOf(t).name == "postgres" && !strings.Contains(state, fmt.Sprintf("%d:", knownMigrations(t))) {
			t.Errorf("after Open the database is %s; want every migration applied", state)
		}
		if !db.IsOpen() {
			t.Error("IsOpen is false after Open")
		}
	})
}

// knownMigrations is how many migrations this binary knows in the running
// test's dialect.
func knownMigrations(t *testing.T) int {
	if dialectOf(t).name == "postgres" {
		return len(postgresMigrations)
	}
	return len(sqliteMigrations)
}

// A store closed under a request — a reload to another database closes
// the old config's store while the requests it was serving finish — fails
// their reads and writes as unavailable (ErrUnavailable), which the ACME
// front answers 503 with Retry-After, as a store not open yet; not as a
// fault of the server (500).
func TestAClosedStoreFailsReadsAndWritesAsUnavailable(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openAt(t, newPlace(t))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CountJobs(ctx); !IsUnavailable(err) {
			t.Errorf("read after Close: %v; want unavailable", err)
		}
		if err := db.Flush(ctx); !errors.Is(err, ErrUnavailable) || !IsUnavailable(err) {
			t.Errorf("write after Close: %v; want ErrUnavailable", err)
		}
	})
}
