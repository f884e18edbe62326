package store

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// On a new PostgreSQL database, whose tables have no statistics yet, the
// plan a connection keeps for reading an authorization reaches the order
// by its key, not by scanning the profile's orders in orders_profile_created:
// a connection keeps its generic plan until the table's first ANALYZE,
// and a plan made on empty tables that reads every order of the profile
// costs each read more with every order stored.
func TestReadingAnAuthorizationOnANewPostgresDatabaseReachesItsOrderByKey(t *testing.T) {
	ctx := context.Background()
	db, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	o := newOrderWithAuthzs(t, db, 1)
	if _, err := db.GetAuthz(ctx, "p", o.AuthzIDs[0]); err != nil {
		t.Fatal(err)
	}
	conn, err := db.r.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The plan a connection keeps: the generic one, made without the
	// parameters' values.
	if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `PREPARE get_authz AS `+pgGetAuthz); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(pgPlan(t, ctx, conn, `EXPLAIN EXECUTE get_authz('`+o.AuthzIDs[0]+`', 'p')`), "\n")
	if !strings.Contains(text, "orders_pkey") || strings.Contains(text, "orders_profile_created") {
		t.Errorf("the authorization's order is not read by its key:\n%s", text)
	}
}

// pgPlan is the text of PostgreSQL's plan for explain (an EXPLAIN
// statement), one line per row, on conn: a prepared statement's generic
// plan is a session's.
func pgPlan(t *testing.T, ctx context.Context, conn *sql.Conn, explain string) []string {
	t.Helper()
	rows, err := conn.QueryContext(ctx, explain)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
