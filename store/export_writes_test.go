package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// WriteCounts is what a SQLite store's writer did, as OpenSQLiteCounting
// counts it: every statement the writer connection ran (each run),
// and every commit of the group commit with the writes it held.
type WriteCounts struct {
	Statements      int
	ByStatement     map[string]int
	Commits         int
	LazyCommits     int
	CommittedWrites int // writes, summed over the commits
}

// WriteCounter counts a store's writes; Take returns the counts so far and
// starts again from zero.
type WriteCounter struct {
	mu sync.Mutex
	c  WriteCounts
}

func (w *WriteCounter) Take() WriteCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.c
	w.c = WriteCounts{ByStatement: map[string]int{}}
	return c
}

// CountingStore is a SQLite store in a file of its own, with its writes
// counted and its WAL readable (see WALFrames).
type CountingStore struct {
	*DB
	Path    string
	Counter *WriteCounter
}

// OpenSQLiteCounting opens a fresh SQLite store whose writer's statements
// and commits are counted.
func OpenSQLiteCounting(t testing.TB) CountingStore {
	t.Helper()
	w := &WriteCounter{c: WriteCounts{ByStatement: map[string]int{}}}
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := OpenSQLite(context.Background(), path, SQLiteOptions{
		observeWrites: func(q string) {
			w.mu.Lock()
			w.c.Statements++
			w.c.ByStatement[q]++
			w.mu.Unlock()
		},
		observeCommit: func(writes int, lazy bool) {
			w.mu.Lock()
			w.c.Commits++
			w.c.CommittedWrites += writes
			if lazy {
				w.c.LazyCommits++
			}
			w.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return CountingStore{DB: db, Path: path, Counter: w}
}

// KeepWAL checkpoints what the WAL holds into the database, empties it,
// and turns automatic checkpoints off, so that from then on the WAL keeps
// every frame the store's commits append.
func (s CountingStore) KeepWAL(ctx context.Context) error {
	w := rawW(s.DB)
	if _, err := w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return err
	}
	_, err := w.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`)
	return err
}

// walHeader and walFrameHeader are the sizes of SQLite's WAL file header
// and of each frame's header (the page number first, big-endian).
const walHeader, walFrameHeader, pageSize = 32, 24, 4096

// WALFrames is how many frames the WAL holds.
func (s CountingStore) WALFrames() (int64, error) {
	st, err := os.Stat(s.Path + "-wal")
	if err != nil {
		return 0, err
	}
	return max(0, st.Size()-walHeader) / (walFrameHeader + pageSize), nil
}

// WALFramesByTree counts the frames from frame from on by the B-tree their
// page belongs to (a table's or an index's name, from SQLite's dbstat),
// "?" for a page of none (the header page's, the freelist's).
func (s CountingStore) WALFramesByTree(ctx context.Context, from int64) (map[string]int, error) {
	owner := map[uint32]string{}
	rows, err := rawW(s.DB).w.QueryContext(ctx, `SELECT name, pageno FROM dbstat`)
	if err != nil {
		return nil, fmt.Errorf("dbstat: %w", err)
	}
	for rows.Next() {
		var (
			name string
			page uint32
		)
		if err := rows.Scan(&name, &page); err != nil {
			rows.Close()
			return nil, err
		}
		owner[page] = name
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(s.Path + "-wal")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	var hdr [walFrameHeader]byte
	for i := from; ; i++ {
		if _, err := f.ReadAt(hdr[:], walHeader+i*(walFrameHeader+pageSize)); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		name, ok := owner[binary.BigEndian.Uint32(hdr[:4])]
		if !ok {
			name = "?"
		}
		out[name]++
	}
}
