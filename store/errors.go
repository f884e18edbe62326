package store

import "errors"

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
)
