package store

import (
	"errors"
	"fmt"
	"strings"
)

// Errors callers classify with errors.Is.
var (
	// ErrNotFound: the row asked for does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrSchemaTooNew: the database was migrated by a newer binary.
	ErrSchemaTooNew = errors.New("store: database schema is newer than this binary")
	// ErrLeaseLost: a settling write found the job no longer leased to the
	// caller (it was reclaimed, released or cancelled meanwhile).
	ErrLeaseLost = errors.New("store: job lease lost")
	// ErrConflict: the change would break a uniqueness rule, such as a
	// second live job for one kind and key.
	ErrConflict = errors.New("store: conflict")
	// ErrWrongState: the row is not in a state that allows the change.
	ErrWrongState = errors.New("store: wrong state")
	// ErrUnavailable: the database cannot take writes for now — its disk
	// is full, it is read-only, its file cannot be written. A condition
	// of the server that passes (space freed, the mount fixed), not a
	// fault of the request: callers answer "try again later".
	ErrUnavailable = errors.New("store: the database cannot take writes now")
	// ErrNotOpen: the store was prepared and not opened yet (see DB.Open);
	// it comes with ErrUnavailable.
	ErrNotOpen = errors.New("store: the database is not open yet")
)

// unavailable wraps err with ErrUnavailable when the dialect says it is
// such a condition.
func (db *DB) unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !(db.dialect.unavailable(err) || closedStore(err)) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// IsUnavailable reports whether err, from any of this package's calls, is
// such a passing condition of the database: ErrUnavailable, which writes
// carry, or a read that failed the same way (a server that refuses
// connections, is shutting down or out of resources). Either dialect's
// errors are recognised by their own types, so the caller need not know
// which database it has.
func IsUnavailable(err error) bool {
	return err != nil && (errors.Is(err, ErrUnavailable) || sqliteDialect{}.unavailable(err) || postgresDialect{}.unavailable(err) ||
		closedStore(err))
}

// closedStore reports whether err says the store was closed under its
// caller: a reload to another database closes the old config's store
// while requests it was serving finish, and they are to be told to come
// back (to the new config), as before Open. The writes answer errClosed,
// the pools database/sql's error, which it does not export.
func closedStore(err error) bool {
	return errors.Is(err, errClosed) || strings.Contains(err.Error(), "sql: database is closed")
}
