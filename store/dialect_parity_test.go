package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// Every dialect's history is the same steps: same versions, same names,
// so that a schema version means one schema whatever the database.
func TestEveryDialectHasTheSameMigrationSteps(t *testing.T) {
	if len(postgresMigrations) != len(sqliteMigrations) {
		t.Fatalf("postgres has %d migrations, sqlite %d", len(postgresMigrations), len(sqliteMigrations))
	}
	for i, m := range sqliteMigrations {
		p := postgresMigrations[i]
		if m.version != i+1 || p.version != m.version || p.name != m.name {
			t.Errorf("step %d: sqlite %d %q, postgres %d %q", i+1, m.version, m.name, p.version, p.name)
		}
	}
}

// schemaColumns lists "table.column" for every column of db's tables.
func schemaColumns(t *testing.T, db *DB) []string {
	t.Helper()
	var stmt string
	switch db.dialect.name() {
	case "sqlite":
		stmt = `SELECT m.name || '.' || c.name FROM sqlite_master m, pragma_table_info(m.name) c
			WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'`
	case "postgres":
		stmt = `SELECT table_name || '.' || column_name FROM information_schema.columns WHERE table_schema = 'public'`
	}
	return sortedStrings(t, db.r, stmt)
}

// schemaIndexes lists the names of db's indexes and triggers, without
// those a database makes for keys by itself.
func schemaIndexes(t *testing.T, db *DB) []string {
	t.Helper()
	var stmt string
	switch db.dialect.name() {
	case "sqlite":
		stmt = `SELECT type || ' ' || name FROM sqlite_master
			WHERE type IN ('index','trigger') AND name NOT LIKE 'sqlite_autoindex_%'`
	case "postgres":
		stmt = `SELECT 'index ' || indexname FROM pg_indexes WHERE schemaname = 'public'
				AND indexname NOT IN (SELECT conname FROM pg_constraint)
			UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal`
	}
	return sortedStrings(t, db.r, stmt)
}

func sortedStrings(t *testing.T, r *sql.DB, stmt string) []string {
	t.Helper()
	rows, err := r.QueryContext(context.Background(), stmt)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.ToLower(s))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Migrated to the last step, both databases have the same tables with
// the same columns, and the same indexes and triggers by name.
func TestEveryDialectMigratesToTheSameTablesColumnsIndexesAndTriggers(t *testing.T) {
	pgtest.DSN(t) // skip (or fail under ACMEPROXY_E2E) without PostgreSQL
	var sq, pg *DB
	for _, d := range testDialects {
		db := d.open(t)
		t.Cleanup(func() { db.Close() })
		if d.name == "sqlite" {
			sq = db
		} else {
			pg = db
		}
	}
	if a, b := schemaColumns(t, sq), schemaColumns(t, pg); !slices.Equal(a, b) {
		t.Errorf("columns differ:\nsqlite   %v\npostgres %v", a, b)
	}
	if a, b := schemaIndexes(t, sq), schemaIndexes(t, pg); !slices.Equal(a, b) {
		t.Errorf("indexes and triggers differ:\nsqlite   %v\npostgres %v", a, b)
	}
}
