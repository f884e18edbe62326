package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migration is one step of the schema history. Steps are append-only: a
// released step is never edited, a change is a new step.
type migration struct {
	version int
	name    string
	stmts   []string
}

const createSchemaTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at BIGINT NOT NULL
)`

// migrate applies, in one transaction, every step the database lacks, and
// records each in schema_migrations. A concurrent opener serializes on the
// dialect's migration lock and then finds nothing left to do. A database
// newer than the binary is refused, the transaction undone.
func (db *DB) migrate(ctx context.Context) error {
	steps := db.dialect.migrations()
	// Up to date already: nothing to write, so a database that takes no
	// writes now (read-only, full) still opens for reads.
	var have sql.NullInt64
	if err := db.r.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&have); err == nil && int(have.Int64) == len(steps) {
		return nil
	}
	return db.withTx(ctx, func(tx *sql.Tx) error {
		if err := db.dialect.lockForMigration(ctx, tx); err != nil {
			return fmt.Errorf("store: waiting for the migration lock: %w", err)
		}
		if _, err := tx.ExecContext(ctx, createSchemaTable); err != nil {
			return fmt.Errorf("store: creating schema table: %w", err)
		}
		var current sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("store: reading schema version: %w", err)
		}
		if int(current.Int64) > len(steps) {
			return tooNew(db.desc, int(current.Int64), len(steps))
		}
		now := time.Now().UnixMilli()
		for _, m := range steps[current.Int64:] {
			for _, stmt := range m.stmts {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("store: migration %d (%s): %w", m.version, m.name, err)
				}
			}
			if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
				m.version, m.name, now); err != nil {
				return fmt.Errorf("store: recording migration %d: %w", m.version, err)
			}
		}
		return nil
	})
}

func tooNew(where string, have, known int) error {
	return fmt.Errorf("%w: %s is at schema version %d, this binary knows up to %d; upgrade the binary or restore a backup",
		ErrSchemaTooNew, where, have, known)
}
