package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// SQLiteUse is what SQLiteInUse saw of a SQLite store in use by a running
// instance.
type SQLiteUse struct {
	// OpenBy is the id of a process that has the database open, 0 when
	// none was seen (see SQLiteInUse).
	OpenBy int
	// Leases are the jobs leased to a runner whose lease has not lapsed,
	// the longest-lasting first: a running instance's, or a crashed one's
	// until they lapse (a stopped one released them).
	Leases []JobLease
}

// InUse reports whether anything was seen.
func (u SQLiteUse) InUse() bool { return u.OpenBy != 0 || len(u.Leases) > 0 }

// JobLease is one job leased to a runner.
type JobLease struct {
	ID    int64
	Kind  string
	Owner string // the runner: host:pid:random
	Until time.Time
}

// The bytes SQLite locks (its unix VFS): in the database file, from
// PENDING_BYTE (1 GiB) the pending, reserved and the 510 shared bytes; in
// the -shm file, the WAL-index lock bytes.
const (
	sqliteLockBytes, sqliteLockBytesLen = 0x40000000, 512
	shmLockBytes, shmLockBytesLen       = 120, 9
)

// SQLiteInUse looks, without writing anything, for signs that the SQLite
// store at path is in use by a running instance, for a caller about to
// copy it (migrate-store), which would miss what that instance writes
// after the copy began:
//
//   - another process holding the database open: a connection in WAL
//     mode holds a shared lock on the database file itself (SQLite's lock
//     bytes at 1 GiB: pending, reserved, shared) once it has read it, and
//     one on its -shm file (the WAL-index lock bytes, 120–128, the last
//     the "DMS" lock held for as long as a connection is open) — seen
//     where the system answers which process holds a lock (Unix; on Linux
//     also a connection of this process). The database file's lock is
//     the file's, whichever name reached it; the -shm file is beside the
//     name the process opened, which from a hard link to the database no
//     path leads to;
//   - a job whose lease has not lapsed at now: a running instance's
//     runner holds one while it runs a job (its periodic sweeps among
//     them, every few minutes); one that crashed leaves its leases until
//     they lapse, a minute or so; one stopped released them.
//
// A file that is not a store (no jobs table) has no leases.
func SQLiteInUse(ctx context.Context, path string, now time.Time) (SQLiteUse, error) {
	var use SQLiteUse
	// SQLite resolves a symlink to the database and keeps its -shm file
	// beside the file it resolves to: that one holds the locks.
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	for _, l := range []struct {
		file     string
		start, n int64
	}{
		{path, sqliteLockBytes, sqliteLockBytesLen},
		{path + "-shm", shmLockBytes, shmLockBytesLen},
	} {
		pid, err := lockHolder(l.file, l.start, l.n)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return use, fmt.Errorf("store: looking for processes that have %s open: %w", path, err)
		}
		if pid != 0 {
			use.OpenBy = pid
			break
		}
	}
	ro, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return use, fmt.Errorf("store: opening %s read-only: %w", path, err)
	}
	defer ro.Close()
	var tables int
	if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'`).Scan(&tables); err != nil {
		return use, fmt.Errorf("store: reading %s: %w", path, err)
	}
	if tables == 0 {
		return use, nil
	}
	rows, err := ro.QueryContext(ctx, `SELECT id, kind, COALESCE(lease_owner, ''), lease_until FROM jobs
		WHERE status = 'running' AND lease_until > ? ORDER BY lease_until DESC, id`, now.UnixMilli())
	if err != nil {
		return use, fmt.Errorf("store: reading the job leases of %s: %w", path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			l     JobLease
			until int64
		)
		if err := rows.Scan(&l.ID, &l.Kind, &l.Owner, &until); err != nil {
			return use, fmt.Errorf("store: reading the job leases of %s: %w", path, err)
		}
		l.Until = time.UnixMilli(until)
		use.Leases = append(use.Leases, l)
	}
	if err := rows.Err(); err != nil {
		return use, fmt.Errorf("store: reading the job leases of %s: %w", path, err)
	}
	return use, nil
}
