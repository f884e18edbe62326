package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
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
