package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// The PostgreSQL side of CopyStore: rows written into the target, and its
// identity sequences moved past them.

// copyTable copies the rows of t from src into the PostgreSQL tx.
func copyTable(ctx context.Context, src *sql.Tx, tx *sql.Tx, t copyTableInfo) (TableCount, error) {
	c := TableCount{Table: t.name}
	// PostgreSQL's types decide how a SQLite value is passed: SQLite may
	// hand back TEXT as bytes, and bytes for a TEXT column must be sent
	// as a string.
	// And SQLite hands back an empty BLOB as nil, which for a NOT NULL
	// column can only be that empty BLOB.
	types := map[string]string{}
	notNull := map[string]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT column_name, data_type, is_nullable FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1`, t.name)
	if err != nil {
		return c, fmt.Errorf("store: columns of %s in the target: %w", t.name, err)
	}
	for rows.Next() {
		var n, typ, nullable string
		if err := rows.Scan(&n, &typ, &nullable); err != nil {
			rows.Close()
			return c, err
		}
		types[n] = typ
		notNull[n] = nullable == "NO"
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
	for i, col := range t.columns {
		quoted[i] = `"` + col + `"`
	}
	batch := newRowBatch(`INSERT INTO `+t.name+` (`+strings.Join(quoted, ", ")+`) VALUES `,
		`(`+marks(len(t.columns))+`)`)
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
	write := func() error {
		if err := batch.write(ctx, tx, postgresDialect{}.rebind); err != nil {
			return fmt.Errorf("store: copying rows of %s: %w", t.name, err)
		}
		return nil
	}
	for in.Next() {
		if err := in.Scan(ptrs...); err != nil {
			return c, fmt.Errorf("store: reading %s: %w", t.name, err)
		}
		for i, col := range t.columns {
			b, isBytes := vals[i].([]byte)
			switch {
			case isBytes && types[col] != "bytea":
				vals[i] = string(b)
			case isBytes && b == nil && notNull[col]:
				vals[i] = []byte{}
			}
			// Text PostgreSQL cannot hold (not UTF-8, a NUL), which
			// SQLite kept as it was given, is copied as text makes
			// it, rather than failing the copy.
			if s, ok := vals[i].(string); ok && types[col] != "bytea" {
				vals[i] = text(s)
			}
		}
		batch.add(vals...)
		if batch.full() {
			if err := write(); err != nil {
				return c, err
			}
		}
	}
	if err := in.Err(); err != nil {
		return c, fmt.Errorf("store: reading %s: %w", t.name, err)
	}
	if err := write(); err != nil {
		return c, err
	}
	// Identity columns go on past the highest id copied and the highest
	// the source ever gave (t.given), whichever is higher.
	ids, err := queryStrings(ctx, tx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 AND is_identity = 'YES'`, t.name)
	if err != nil {
		return c, fmt.Errorf("store: identity columns of %s: %w", t.name, err)
	}
	for _, col := range ids {
		if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence($1, $2), GREATEST(COALESCE(MAX("`+col+`"), 0), $3) + 1, false) FROM `+t.name,
			t.name, col, t.given); err != nil {
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
