package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestOpenCreatesSchemaAndReopensIdempotently(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	for i := 0; i < 2; i++ {
		db, err := OpenSQLite(ctx, path, SQLiteOptions{})
		if err != nil {
			t.Fatalf("open #%d: %v", i+1, err)
		}
		var n int
		if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != len(sqliteMigrations) {
			t.Fatalf("open #%d: %d migrations recorded, want %d", i+1, n, len(sqliteMigrations))
		}
		var mode string
		if err := rawW(db).QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
			t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
		}
		var fk int
		if err := db.r.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
			t.Fatalf("foreign_keys = %d, %v; want 1", fk, err)
		}
		db.Close()
	}
}

// The database holds secrets (the nonce and CSRF keys, EAB MAC keys, the
// relay's account keys): a new one, with its -wal and -shm, is its
// owner's alone; an existing one loses what others could do with it, and
// keeps its group's access.
func TestASQLiteDatabaseAndItsWALAreKeptFromOtherUsers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// before, when set, is the mode of a database (and of an empty
		// -wal beside it) that exists before the open.
		before os.FileMode
		want   os.FileMode
	}{
		{"a new database is created for its owner only", 0, 0o600},
		{"an existing world-readable database loses its others' access", 0o644, 0o640},
		{"an existing database keeps its group's access", 0o660, 0o660},
		{"an existing private database is left as it is", 0o600, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.db")
			if tc.before != 0 {
				db, err := OpenSQLite(ctx, path, SQLiteOptions{})
				if err != nil {
					t.Fatal(err)
				}
				db.Close()
				if err := os.Chmod(path, tc.before); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path+"-wal", nil, tc.before); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path+"-wal", tc.before); err != nil { // whatever the umask
					t.Fatal(err)
				}
			}
			db, err := OpenSQLite(ctx, path, SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Secret(ctx, "test", 32, time.Now()); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{path, path + "-wal", path + "-shm"} {
				fi, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode().Perm(); got != tc.want {
					t.Errorf("%s has mode %v, want %v", filepath.Base(f), got, tc.want)
				}
			}
		})
	}
}

func TestOpenRefusesNewerSchemaAndLeavesFileUntouched(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "newer.db")
	db, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A newer binary ran one more migration.
	if _, err := rawW(db).ExecContext(ctx, `CREATE TABLE from_the_future (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := rawW(db).ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`,
		len(sqliteMigrations)+1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, path)

	_, err = OpenSQLite(ctx, path, SQLiteOptions{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open: got %v, want ErrSchemaTooNew", err)
	}
	if want := fmt.Sprintf("schema version %d, this binary knows up to %d", len(sqliteMigrations)+1, len(sqliteMigrations)); !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q does not say %q", err, want)
	}
	after := snapshotFiles(t, path)
	if !bytes.Equal(before, after) {
		t.Fatal("refused database file was modified")
	}
}

// snapshotFiles reads the database file; the WAL, if any, must be empty
// after a clean close, so the main file is the whole database.
func snapshotFiles(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		t.Fatalf("%s-wal has %d bytes after close", path, fi.Size())
	}
	return b
}

func TestOpenRejectsBadSynchronousSetting(t *testing.T) {
	_, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "x.db"), SQLiteOptions{Synchronous: "OFF"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("synchronous")) {
		t.Fatalf("got %v, want an error naming synchronous", err)
	}
}
