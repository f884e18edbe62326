package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Analyze gathers PostgreSQL's planner statistics of every table, after a
// bulk load (CopyStore, seeding) — what autovacuum would do by itself
// within a minute or so. Until then each statement's cached plan is
// chosen for tables never analyzed, and on a benchmark's fresh database
// an order read cost five times its analyzed plan (see
// docs/performance-log.md, "PostgreSQL's plans in the benchmark"). On
// SQLite it does nothing: this store's SQLite plans do not depend on
// statistics (no sqlite_stat1), and gathering some would change them.
func (db *DB) Analyze(ctx context.Context) error {
	if db.dialect.name() != "postgres" {
		return nil
	}
	if err := db.eng.do(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `ANALYZE`)
		return err
	}, false); err != nil {
		return fmt.Errorf("store: analyzing %s: %w", db.desc, err)
	}
	return nil
}
