package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrTargetNotEmpty: CopyStore's target already holds data.
var ErrTargetNotEmpty = errors.New("store: the target database is not empty")

// TableCount is the rows of one table CopyStore copied, counted on each
// side after the copy.
type TableCount struct {
	Table        string
	Source, Dest int64
}

// CopyStore copies every row of every table of src, a SQLite store, into
// dst, a PostgreSQL store, for an operator moving a single instance onto
// the database a fleet shares. It is an offline operation: nothing may
// write to src meanwhile (stop Caddy first).
//
// Both stores are at this binary's schema version (opening them migrated
// them). dst must be empty — no table holds a row — or ErrTargetNotEmpty
// is returned and nothing is written. The copy is one transaction on dst:
// a failure leaves it empty. Tables are copied parents first (foreign
// keys), identity sequences are moved past the copied ids, and the row
// counts of both sides are compared before the transaction commits.
func CopyStore(ctx context.Context, src, dst *DB) ([]TableCount, error) {
	if src.dialect.name() != "sqlite" || dst.dialect.name() != "postgres" {
		return nil, fmt.Errorf("store: copying from %s to %s: only from SQLite to PostgreSQL", src.dialect.name(), dst.dialect.name())
	}
	tables, err := sqliteTablesParentsFirst(ctx, src.r)
	if err != nil {
		return nil, err
	}
	var counts []TableCount
	err = dst.eng.do(ctx, func(tx *sql.Tx) error {
		counts = counts[:0] // fn may run again (see engine)
		for _, t := range tables {
			var n int64
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&n); err != nil {
				return fmt.Errorf("store: counting %s in the target: %w", t.name, err)
			}
			if n > 0 {
				return fmt.Errorf("%w: table %s holds %d rows", ErrTargetNotEmpty, t.name, n)
			}
		}
		for _, t := range tables {
			c, err := copyTable(ctx, src.r, tx, t)
			if err != nil {
				return err
			}
			counts = append(counts, c)
		}
		for _, c := range counts {
			if c.Source != c.Dest {
				return fmt.Errorf("store: table %s: %d rows in the source, %d in the target", c.Table, c.Source, c.Dest)
			}
		}
		return nil
	}, false)
	if err != nil {
		return nil, err
	}
	return counts, nil
}

type copyTableInfo struct {
	name    string
	columns []string
}

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

func queryStrings(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
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

// copyTable copies the rows of t from src into the PostgreSQL tx.
func copyTable(ctx context.Context, src *sql.DB, tx *sql.Tx, t copyTableInfo) (TableCount, error) {
	c := TableCount{Table: t.name}
	// PostgreSQL's types decide how a SQLite value is passed: SQLite may
	// hand back TEXT as bytes, and bytes for a TEXT column must be sent
	// as a string.
	types := map[string]string{}
	rows, err := tx.QueryContext(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1`, t.name)
	if err != nil {
		return c, fmt.Errorf("store: columns of %s in the target: %w", t.name, err)
	}
	for rows.Next() {
		var n, typ string
		if err := rows.Scan(&n, &typ); err != nil {
			rows.Close()
			return c, err
		}
		types[n] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return c, err
	}
	for _, col := range t.columns {
		if _, ok := types[col]; !ok {
			return c, fmt.Errorf("store: column %s.%s of the source is not in the target", t.name, col)
		}
	}

	quoted := make([]string, len(t.columns))
	marks := make([]string, len(t.columns))
	for i, col := range t.columns {
		quoted[i] = `"` + col + `"`
		marks[i] = fmt.Sprintf("$%d", i+1)
	}
	insert, err := tx.PrepareContext(ctx, `INSERT INTO `+t.name+` (`+strings.Join(quoted, ", ")+`) VALUES (`+strings.Join(marks, ", ")+`)`)
	if err != nil {
		return c, fmt.Errorf("store: preparing the copy of %s: %w", t.name, err)
	}
	defer insert.Close()
	in, err := src.QueryContext(ctx, `SELECT `+strings.Join(quoted, ", ")+` FROM `+t.name)
	if err != nil {
		return c, fmt.Errorf("store: reading %s: %w", t.name, err)
	}
	defer in.Close()
	vals := make([]any, len(t.columns))
	ptrs := make([]any, len(t.columns))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for in.Next() {
		if err := in.Scan(ptrs...); err != nil {
			return c, fmt.Errorf("store: reading %s: %w", t.name, err)
		}
		for i, col := range t.columns {
			if b, ok := vals[i].([]byte); ok && types[col] != "bytea" {
				vals[i] = string(b)
			}
		}
		if _, err := insert.ExecContext(ctx, vals...); err != nil {
			return c, fmt.Errorf("store: copying a row of %s: %w", t.name, err)
		}
	}
	if err := in.Err(); err != nil {
		return c, fmt.Errorf("store: reading %s: %w", t.name, err)
	}
	// Identity columns go on from the highest id copied.
	ids, err := queryTxStrings(ctx, tx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 AND is_identity = 'YES'`, t.name)
	if err != nil {
		return c, fmt.Errorf("store: identity columns of %s: %w", t.name, err)
	}
	for _, col := range ids {
		if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence($1, $2), COALESCE(MAX("`+col+`"), 0) + 1, false) FROM `+t.name,
			t.name, col); err != nil {
			return c, fmt.Errorf("store: moving the sequence of %s.%s: %w", t.name, col, err)
		}
	}
	if err := src.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&c.Source); err != nil {
		return c, fmt.Errorf("store: counting %s in the source: %w", t.name, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&c.Dest); err != nil {
		return c, fmt.Errorf("store: counting %s in the target: %w", t.name, err)
	}
	return c, nil
}

func queryTxStrings(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
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
