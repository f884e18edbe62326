package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
)

func TestIsUnavailableKnowsEachDatabasesPassingConditions(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"ok/a write refused for a full disk", fmt.Errorf("store: x: %w", ErrUnavailable), true},
		{"ok/a server shutting down", &pgconn.PgError{Code: "57P01"}, true},
		{"ok/a server out of connections", fmt.Errorf("store: order x: %w", &pgconn.PgError{Code: "53300"}), true},
		{"ok/a connection the server closed mid-statement", fmt.Errorf("store: order x: %w", io.ErrUnexpectedEOF), true},
		{"ok/a connection reset on the way", fmt.Errorf("store: order x: %w",
			&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
		{"ok/a connection whose peer is gone", fmt.Errorf("store: order x: %w",
			&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), true},
		{"fail/a row that is not there", fmt.Errorf("store: order x: %w", sql.ErrNoRows), false},
		{"fail/a constraint the request broke", &pgconn.PgError{Code: "23505"}, false},
		{"fail/no error", nil, false},
		{"fail/any other error", errors.New("boom"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnavailable(tc.err); got != tc.want {
				t.Errorf("IsUnavailable(%v) = %v; want %v", tc.err, got, tc.want)
			}
		})
	}
}

// A read while PostgreSQL is stopped fails as unavailable, so that the
// admin API and the ACME front answer it 503 rather than as a fault.
func TestAReadWhilePostgreSQLIsStoppedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	db, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pgtest.Stop(t)
	defer pgtest.Start(t)
	_, err = db.GetOrder(ctx, "p", "some-order")
	if err == nil || !IsUnavailable(err) {
		t.Fatalf("a read while the server is stopped: %v; want an unavailable error", err)
	}
}

// A statement in flight when its PostgreSQL backend dies — a crash, the
// OOM killer, an immediate shutdown — fails as unavailable, for a 503
// with Retry-After rather than a 500: pgx reports the lost connection
// with no PostgreSQL error code. The store's call waits on a lock a raw
// transaction holds, and its backend is killed. (Not parallel: killing a
// backend makes the binary's cluster restart every session.)
func TestAStatementWhosePostgresBackendDiesMidwayIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(context.Context, *DB) error
	}{
		{"a read", func(ctx context.Context, db *DB) error { _, err := db.CountJobs(ctx); return err }},
		{"a write", func(ctx context.Context, db *DB) error {
			_, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1}, t0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dsn := pgtest.DSN(t)
			db := openPostgres(t, dsn)
			raw, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			tx, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- tc.do(ctx, db) }()
			var pid int
			for pid == 0 {
				err := raw.QueryRowContext(ctx, `SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&pid)
				if err != nil && !errors.Is(err, sql.ErrNoRows) || ctx.Err() != nil {
					t.Fatalf("waiting for the store's statement to wait on the lock: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := proctest.Kill(pid); err != nil {
				t.Fatalf("killing backend %d: %v", pid, err)
			}
			err = <-errc
			if err == nil || !IsUnavailable(err) {
				t.Errorf("%s whose backend died: %v; want an unavailable error", tc.name, err)
			}
			// The server restarts its sessions after the crash, the raw
			// transaction's too: wait for that, then for the server to
			// take connections again, for the tests after this one.
			for {
				if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatal("PostgreSQL did not restart its sessions within a minute of the killed backend")
				}
				time.Sleep(50 * time.Millisecond)
			}
			for raw.PingContext(ctx) != nil {
				if ctx.Err() != nil {
					t.Fatal("PostgreSQL did not come back within a minute of the killed backend")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
