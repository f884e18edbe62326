package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestConcurrentWritesCommitTogetherButFailAlone(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	boom := errors.New("boom")
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = db.withTx(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO used_nonces (k) VALUES (?)`, fmt.Sprint("n", i)); err != nil {
					return err
				}
				if i%10 == 0 {
					return boom // its insert must be undone, nobody else's
				}
				return nil
			})
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if i%10 == 0 && !errors.Is(err, boom) {
			t.Errorf("write %d: %v, want boom", i, err)
		}
		if i%10 != 0 && err != nil {
			t.Errorf("write %d failed: %v", i, err)
		}
	}
	var count int
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM used_nonces`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != n-n/10 {
		t.Fatalf("%d rows committed, want %d (the failed writes' rows undone, every other kept)", count, n-n/10)
	}
}

func TestAWriteThatFailsOnAConstraintLeavesItsBatchIntact(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	if fresh, err := db.UseNonce(ctx, "dup", t0); err != nil || !fresh {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_ = db.withTx(ctx, func(tx *sql.Tx) error {
				// A plain INSERT of an existing key: a constraint error inside
				// the batch's transaction.
				_, err := tx.ExecContext(ctx, `INSERT INTO used_nonces (k) VALUES (?)`, nonceKey(t0, "dup"))
				return err
			})
			if _, err := db.UseNonce(ctx, fmt.Sprint("ok", i), t0); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	var count int
	db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM used_nonces`).Scan(&count)
	if count != 51 {
		t.Fatalf("%d nonces stored, want 51", count)
	}
}

func TestAWriteHandedToAClosedStoreIsRefused(t *testing.T) {
	db, err := OpenSQLite(context.Background(), t.TempDir()+"/c.db", SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := db.UseNonce(ctx, "x", t0); !errors.Is(err, errClosed) {
		t.Fatalf("got %v, want errClosed", err)
	}
}

// syncLevel is the synchronous level a write's transaction commits with,
// as SQLite reports it inside the transaction (1 NORMAL, 2 FULL).
func syncLevel(ctx context.Context, tx *sql.Tx) (int, error) {
	var level int
	err := tx.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&level)
	return level, err
}

func TestDurableWritesCommitWithFullSyncWhileLazyOnesMaySkipIt(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	const n = 100
	var wg sync.WaitGroup
	levels := make([]int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			write := db.withTx
			if i%2 == 1 {
				write = db.withLazyTx
			}
			if err := write(ctx, func(tx *sql.Tx) (err error) {
				levels[i], err = syncLevel(ctx, tx)
				return err
			}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i += 2 {
		if levels[i] != 2 {
			t.Errorf("durable write %d committed with synchronous=%d, want 2 (FULL)", i, levels[i])
		}
	}
	// Alone, a lazy write skips the fsync; the next durable one does not.
	for _, tc := range []struct {
		name  string
		write func(context.Context, func(*sql.Tx) error) error
		want  int
	}{
		{"a lazy write alone", db.withLazyTx, 1},
		{"a durable write after it", db.withTx, 2},
	} {
		var got int
		if err := tc.write(ctx, func(tx *sql.Tx) (err error) { got, err = syncLevel(ctx, tx); return err }); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s committed with synchronous=%d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAStoreOpenedWithNormalSyncNeverSwitchesToFull(t *testing.T) {
	ctx := context.Background()
	db, err := OpenSQLite(ctx, t.TempDir()+"/n.db", SQLiteOptions{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, write := range []func(context.Context, func(*sql.Tx) error) error{db.withLazyTx, db.withTx} {
		var got int
		if err := write(ctx, func(tx *sql.Tx) (err error) { got, err = syncLevel(ctx, tx); return err }); err != nil {
			t.Fatal(err)
		}
		if got != 1 {
			t.Errorf("committed with synchronous=%d, want 1 (NORMAL, as configured)", got)
		}
	}
}

// BenchmarkConcurrentNonceUse measures what group commit is for: many
// requests each recording one nonce at once (synchronous=FULL).
func BenchmarkConcurrentNonceUse(b *testing.B) {
	db, err := OpenSQLite(context.Background(), b.TempDir()+"/b.db", SQLiteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.SetParallelism(16)
	var i int64
	var mu sync.Mutex
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			i++
			n := i
			mu.Unlock()
			if _, err := db.UseNonce(context.Background(), fmt.Sprint(n), t0); err != nil {
				b.Error(err)
			}
		}
	})
}

func TestFlushSucceedsEveryTimeItIsCalled(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	for i := range 3 {
		if err := db.Flush(ctx); err != nil {
			t.Fatalf("flush #%d: %v", i+1, err)
		}
	}
}
