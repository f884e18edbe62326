package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Upgrading a database whose rate_limits table has a rowid (schema 20)
// moves its buckets into the table without one, each as it was: a bucket
// emptied before the upgrade is still empty after it, one with units left
// still has them, and the pending authorizations bound of an account is
// kept.
func TestUpgradingKeepsEveryRateLimitBucketAsItWas(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	raw := oldSchemaDB(t, path, 20)
	emptied, half := perMinute("orders_per_account/p/emptied"), perMinute("orders_per_account/p/half")
	at := t0.UnixNano()
	bound := pendingBoundKey("p", "acct")
	for _, row := range []struct {
		key string
		tat int64
	}{
		// Three of three spent at t0; one of three.
		{emptied.Key, at + 3*int64(time.Minute)},
		{half.Key, at + int64(time.Minute)},
		// 2 pending authorizations, expired in an hour.
		{bound, packBound(t0.Add(time.Hour).UnixNano(), 2)},
	} {
		if _, err := raw.Exec(`INSERT INTO rate_limits (key, tat_ns) VALUES (?, ?)`, row.key, row.tat); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()

	db, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var withoutRowid int
	if err := db.r.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE name = 'rate_limits'`).Scan(&withoutRowid); err != nil || withoutRowid != 1 {
		t.Fatalf("rate_limits after the upgrade: without rowid %d (%v); want 1", withoutRowid, err)
	}
	if out, ok := spend(t, db, t0, emptied); ok || out[0].RetryAfter != time.Minute {
		t.Errorf("the bucket emptied before the upgrade: allowed %v, retry after %s; want denied for a minute", ok, out[0].RetryAfter)
	}
	if out, ok := spend(t, db, t0, half); !ok || out[0].Remaining != 1 {
		t.Errorf("the bucket with 2 left before the upgrade: allowed %v, %d remaining; want allowed with 1", ok, out[0].Remaining)
	}
	// Every row, the bound's included, is as it was written.
	rows := map[string]int64{}
	r, err := db.r.QueryContext(ctx, `SELECT key, tat_ns FROM rate_limits`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var (
			k   string
			tat int64
		)
		if err := r.Scan(&k, &tat); err != nil {
			t.Fatal(err)
		}
		rows[k] = tat
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := rows[bound], packBound(t0.Add(time.Hour).UnixNano(), 2); len(rows) != 3 || got != want {
		t.Errorf("after the upgrade and two spends: %d rows, the bound %d; want 3 rows and the bound as it was, %d", len(rows), got, want)
	}
}
