package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// The SQLite side of CopyStore: the source's tables and their order.

// sqliteTablesParentsFirst lists the tables of a SQLite store (not its
// schema bookkeeping), each after the tables its foreign keys point to.
func sqliteTablesParentsFirst(ctx context.Context, db *sql.DB) ([]copyTableInfo, error) {
	names, err := queryStrings(ctx, db, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: listing the source's tables: %w", err)
	}
	parents := map[string][]string{}
	info := map[string]copyTableInfo{}
	for _, n := range names {
		cols, err := queryStrings(ctx, db, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, n)
		if err != nil {
			return nil, fmt.Errorf("store: columns of %s: %w", n, err)
		}
		info[n] = copyTableInfo{name: n, columns: cols}
		if parents[n], err = queryStrings(ctx, db, `SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)`, n); err != nil {
			return nil, fmt.Errorf("store: foreign keys of %s: %w", n, err)
		}
	}
	var (
		out   []copyTableInfo
		done  = map[string]bool{}
		visit func(n string, path []string) error
	)
	visit = func(n string, path []string) error {
		if done[n] {
			return nil
		}
		if slices.Contains(path, n) {
			return fmt.Errorf("store: the foreign keys of %s form a cycle", strings.Join(append(path, n), " → "))
		}
		for _, p := range parents[n] {
			if p != n {
				if err := visit(p, append(path, n)); err != nil {
					return err
				}
			}
		}
		done[n] = true
		out = append(out, info[n])
		return nil
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sqliteSequences is, per AUTOINCREMENT table of a SQLite store, the
// highest id it ever gave (sqlite_sequence), read through q.
func sqliteSequences(ctx context.Context, q stringQuerier) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, seq FROM sqlite_sequence`)
	if err != nil {
		return nil, fmt.Errorf("store: reading the source's id sequences: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			name string
			seq  int64
		)
		if err := rows.Scan(&name, &seq); err != nil {
			return nil, fmt.Errorf("store: reading the source's id sequences: %w", err)
		}
		out[name] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: reading the source's id sequences: %w", err)
	}
	return out, nil
}

// stringQuerier is what queryStrings reads through: a pool or a
// transaction.
type stringQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryStrings is the first column of q's rows, as strings.
func queryStrings(ctx context.Context, db stringQuerier, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
