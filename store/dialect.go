package store

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect is the seam between the statements this package writes once and
// the databases it runs on. Statements are written with ? placeholders and
// the SQL both SQLite and PostgreSQL accept (RETURNING, ON CONFLICT, partial
// indexes); what genuinely differs lives behind these methods.
type dialect interface {
	name() string
	// migrations is the dialect's ordered, append-only schema history.
	migrations() []migration
	// rebind turns ? placeholders into the dialect's own.
	rebind(stmt string) string
	// unavailable reports whether err says the database cannot take
	// writes for now (ErrUnavailable).
	unavailable(err error) bool
}

type sqliteDialect struct{}

func (sqliteDialect) name() string              { return "sqlite" }
func (sqliteDialect) migrations() []migration   { return sqliteMigrations }
func (sqliteDialect) rebind(stmt string) string { return stmt }

// unavailable: SQLITE_FULL (the disk, or max_page_count), SQLITE_READONLY,
// SQLITE_IOERR and SQLITE_CANTOPEN, with their extended codes.
func (sqliteDialect) unavailable(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
		return true
	}
	return false
}
