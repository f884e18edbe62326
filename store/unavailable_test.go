package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fillUp writes audit rows into db until the database refuses one, and
// returns that refusal.
func fillUp(t *testing.T, db *DB) error {
	t.Helper()
	detail := strings.Repeat("x", 2000)
	for i := range 10000 {
		err := db.InsertAudit(context.Background(), AuditEvent{At: t0, Event: "filler", Outcome: "success", Detail: detail})
		if err != nil {
			return err
		}
		if i == 9999 {
			t.Fatal("the database never filled up")
		}
	}
	return nil
}

func TestAFullDatabaseAnswersWritesWithErrUnavailableAndRecoversOnceThereIsRoom(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "full.db")
	db, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	full, err := OpenSQLite(ctx, path, SQLiteOptions{MaxPages: int(fi.Size()/4096) + 8})
	if err != nil {
		t.Fatal(err)
	}
	werr := fillUp(t, full)
	if !errors.Is(werr, ErrUnavailable) {
		t.Fatalf("a write to a full database: %v; want ErrUnavailable", werr)
	}
	// Every write path says so, the lazy ones too.
	if _, err := full.lazyWr.ExecContext(ctx, `INSERT INTO audit_events (at, event, outcome, detail) VALUES (0, 'lazy', 'success', ?)`,
		strings.Repeat("y", 8000)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a lazy write to a full database: %v; want ErrUnavailable", err)
	}
	// Reads go on.
	if _, err := full.SearchAudit(ctx, AuditFilter{Event: "filler", Limit: 1}); err != nil {
		t.Errorf("a read from a full database: %v", err)
	}
	full.Close()

	// Room again (here: the bound lifted): writes succeed, and nothing
	// written before was lost.
	roomy, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer roomy.Close()
	before, err := roomy.SearchAudit(ctx, AuditFilter{Event: "filler", Limit: 1000})
	if err != nil || len(before) == 0 {
		t.Fatalf("rows written before the disk filled: %d %v", len(before), err)
	}
	if err := roomy.InsertAudit(ctx, AuditEvent{At: t0, Event: "after", Outcome: "success"}); err != nil {
		t.Fatalf("a write once there is room: %v", err)
	}
}

func TestOtherWriteErrorsAreNotUnavailable(t *testing.T) {
	db := openTest(t)
	if err := db.InsertAudit(context.Background(), AuditEvent{At: t0, Event: "e", Outcome: "success"}); err != nil {
		t.Fatal(err)
	}
	_, err := db.wr.ExecContext(context.Background(), `UPDATE audit_events SET detail = 'changed'`)
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("an update the audit trigger refuses: %v; want an error that is not ErrUnavailable", err)
	}
	_, err = db.wr.ExecContext(context.Background(), `INSERT INTO no_such_table VALUES (1)`)
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("a statement on a missing table: %v; want an error that is not ErrUnavailable", err)
	}
}
