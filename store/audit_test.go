package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// checkClipped checks that got is orig bounded to max bytes: orig itself
// when it fits, else a prefix of it cut at a character boundary and
// marked as cut.
func checkClipped(t *testing.T, what, orig, got string, max int) {
	t.Helper()
	switch {
	case len(orig) <= max && got != orig:
		t.Errorf("%s: %q fits in %d bytes but was stored as %q", what, orig, max, got)
	case len(orig) <= max:
	case len(got) > max:
		t.Errorf("%s: stored %d bytes; the bound is %d", what, len(got), max)
	case !strings.HasSuffix(got, CutMark):
		t.Errorf("%s: cut to %d bytes without the %q mark", what, len(got), CutMark)
	case !strings.HasPrefix(orig, strings.TrimSuffix(got, CutMark)):
		t.Errorf("%s: %q is not a prefix of what was sent", what, got)
	case utf8.ValidString(orig) && !utf8.ValidString(got):
		t.Errorf("%s: cut inside a character: %q", what, got)
	case len(got) < max-len(CutMark)-utf8.UTFMax:
		t.Errorf("%s: cut to %d bytes, far below the bound %d", what, len(got), max)
	}
}

func TestAnAuditRowStoresEveryClientStringCutToItsBound(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		// The User-Agent a client sent through Caddy over HTTP/2 (16 KB), with
		// two-byte characters placed so the bound falls inside one.
		ua := "x" + strings.Repeat("é", 8<<10)
		long := strings.Repeat("d", 16<<10)
		ev := AuditEvent{At: t0, Event: "revocation_refused", Outcome: "refused", Profile: "p",
			ActorKind: "certificate_key", ActorID: strings.Repeat("a", 300), OrderID: "o1", AccountID: strings.Repeat("c", 257),
			Identifiers: []acme.Identifier{{Type: "dns", Value: strings.Repeat("n", 1000)}},
			Serial:      strings.Repeat("0f", 200), ClientIP: "192.0.2.1", ClientName: strings.Repeat("h", 400) + ".example",
			UserAgent: ua, Reason: long, Detail: long}
		if err := db.InsertAudit(ctx, ev); err != nil {
			t.Fatal(err)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{})
		if err != nil || len(rows) != 1 {
			t.Fatalf("%d rows, %v", len(rows), err)
		}
		got := rows[0]
		for _, f := range []struct {
			name, sent, stored string
			max                int
		}{
			{"user_agent", ev.UserAgent, got.UserAgent, AuditFieldMax},
			{"detail", ev.Detail, got.Detail, AuditDetailMax},
			{"reason", ev.Reason, got.Reason, AuditFieldMax},
			{"actor_id", ev.ActorID, got.ActorID, AuditFieldMax},
			{"account_id", ev.AccountID, got.AccountID, AuditFieldMax},
			{"serial", ev.Serial, got.Serial, AuditFieldMax},
			{"client_name", ev.ClientName, got.ClientName, AuditFieldMax},
			{"identifier", ev.Identifiers[0].Value, got.Identifiers[0].Value, AuditFieldMax},
			{"profile", ev.Profile, got.Profile, AuditFieldMax},
			{"client_ip", ev.ClientIP, got.ClientIP, AuditFieldMax},
			{"order_id", ev.OrderID, got.OrderID, AuditFieldMax},
		} {
			checkClipped(t, f.name, f.sent, f.stored, f.max)
		}
		if len(got.UserAgent) == len(ev.UserAgent) {
			t.Errorf("the 16 KB user agent was stored whole")
		}
		if ev.Identifiers[0].Value != strings.Repeat("n", 1000) {
			t.Errorf("bounding the row changed the caller's identifiers")
		}
	})
}

// auditAt writes one row per time and returns their ids in order.
func auditAt(t *testing.T, db *DB, ats ...time.Time) {
	t.Helper()
	for i, at := range ats {
		if err := db.InsertAudit(context.Background(), AuditEvent{At: at, Event: "certificate_issued", Outcome: "success",
			OrderID: fmt.Sprintf("o%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPruneAuditDeletesOnlyRowsOlderThanTheCutoffInBatchesAndRecordsItself(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		cutoff := t0.Add(30 * 24 * time.Hour)
		var old []time.Time
		for i := range 7 {
			old = append(old, cutoff.Add(-time.Duration(i+1)*time.Hour))
		}
		old = append(old, cutoff.Add(-time.Millisecond))
		auditAt(t, db, old...)
		auditAt(t, db, cutoff, cutoff.Add(time.Millisecond), cutoff.Add(time.Hour))

		var recorded, progress []int64
		n, err := db.PruneAudit(ctx, cutoff, 3, nil, func(deleted int64, stopped error) (AuditEvent, bool) {
			switch {
			case errors.Is(stopped, ErrPruneUnfinished):
				progress = append(progress, deleted)
			case stopped != nil:
				t.Errorf("a prune running to the end is recorded as stopped by %v", stopped)
			default:
				recorded = append(recorded, deleted)
			}
			return AuditEvent{At: cutoff.Add(2 * time.Hour), Event: "audit_pruned", Outcome: "success", ActorKind: "admin",
				Detail: fmt.Sprintf("deleted %d", deleted)}, true
		})
		if err != nil || n != int64(len(old)) {
			t.Fatalf("PruneAudit: %d, %v; want %d deleted", n, err, len(old))
		}
		if len(recorded) != 1 || recorded[0] != n {
			t.Errorf("the prune asked for its row %v; want once, with %d", recorded, n)
		}
		// The batches before the last keep the row of what they deleted,
		// should the process end; the last one's row replaces it.
		if fmt.Sprint(progress) != "[3 6]" {
			t.Errorf("the prune kept its progress after the batches that deleted %v; want [3 6]", progress)
		}
		var left int
		if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM prune_progress`).Scan(&left); err != nil || left != 0 {
			t.Errorf("%d progress rows left behind (%v) by a prune that ran to the end", left, err)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var kept []time.Time
		pruneRows := 0
		for _, r := range rows {
			if r.Event == "audit_pruned" {
				pruneRows++
				if r.Detail != "deleted 8" || r.ActorKind != "admin" {
					t.Errorf("the prune's row: %+v", r)
				}
				continue
			}
			kept = append(kept, r.At)
			if r.At.Before(cutoff) {
				t.Errorf("a row at %v, before the cutoff %v, survived", r.At, cutoff)
			}
		}
		if len(kept) != 3 || pruneRows != 1 {
			t.Errorf("kept %v and %d prune rows; want the 3 rows at or after the cutoff and 1", kept, pruneRows)
		}
		var cutoffs int
		if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_prune_cutoff`).Scan(&cutoffs); err != nil || cutoffs != 0 {
			t.Errorf("%d cutoffs left behind (%v): a later delete would pass the trigger", cutoffs, err)
		}

		// Nothing left to prune: no row deleted, and a record that declines
		// writes none.
		n, err = db.PruneAudit(ctx, cutoff, 3, nil, func(int64, error) (AuditEvent, bool) { return AuditEvent{}, false })
		if err != nil || n != 0 {
			t.Errorf("a second prune: %d, %v; want 0", n, err)
		}
		if again, _ := db.SearchAudit(ctx, AuditFilter{Limit: 1000}); len(again) != len(rows) {
			t.Errorf("%d rows after a prune that deleted nothing; want %d", len(again), len(rows))
		}
	})
}

func TestAuditRowsAreNeverUpdatedAndDeletedOnlyByAPrune(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		auditAt(t, db, t0, t0.Add(time.Hour))
		refused := func(what, stmt string, args ...any) {
			t.Helper()
			_, err := rawW(db).ExecContext(ctx, stmt, args...)
			if err == nil || !strings.Contains(err.Error(), "insert-only") {
				t.Errorf("%s: %v; want refused as insert-only", what, err)
			}
		}
		refused("an update", `UPDATE audit_events SET detail = 'rewritten'`)
		refused("an update of one row", `UPDATE audit_events SET outcome = 'refused' WHERE at = ?`, t0.UnixMilli())
		refused("a delete outside a prune", `DELETE FROM audit_events`)
		// Even with a prune's cutoff in place, a row at or after it stays.
		if _, err := rawW(db).ExecContext(ctx, `INSERT INTO audit_prune_cutoff (id, before) VALUES (1, ?)`, t0.Add(time.Minute).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		refused("a delete of a row after the cutoff", `DELETE FROM audit_events WHERE at = ?`, t0.Add(time.Hour).UnixMilli())
		refused("an update during a prune", `UPDATE audit_events SET detail = 'x' WHERE at = ?`, t0.UnixMilli())
		if _, err := rawW(db).ExecContext(ctx, `DELETE FROM audit_prune_cutoff`); err != nil {
			t.Fatal(err)
		}
		rows, _ := db.SearchAudit(ctx, AuditFilter{})
		if len(rows) != 2 || rows[0].Detail != "" || rows[1].Outcome != "success" {
			t.Errorf("the trail changed: %+v", rows)
		}
	})
}

func TestARelayOrderStoresTheClientsUserAgentCutToTheBound(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := processingOrder(t, db)
		ua := strings.Repeat("u", 16<<10)
		r, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}, ClientAddr: "10.0.0.7", UserAgent: ua}, t0)
		if err != nil {
			t.Fatal(err)
		}
		checkClipped(t, "user_agent", ua, r.UserAgent, AuditFieldMax)
		if r.ClientAddr != "10.0.0.7" {
			t.Errorf("client address %q", r.ClientAddr)
		}
	})
}

// A prune that stops part way — its deadline passed, its client went
// away, a batch failed — has deleted the batches before: its row records
// those, as the row of a prune that ran to the end records all it
// deleted. Stopped without it, a prune deleted audit rows that no row
// said anyone deleted.
func TestAPruneStoppedPartWayRecordsTheRowsItDeleted(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		cutoff := oldRowsTheSecondBatchFailsOn(t, db)

		n, err := db.PruneAudit(ctx, cutoff, 3, nil, func(deleted int64, stopped error) (AuditEvent, bool) {
			return AuditEvent{At: cutoff, Event: "audit_pruned", Outcome: "interrupted", ActorKind: "admin",
				Detail: fmt.Sprintf("deleted %d, stopped by: %v", deleted, stopped)}, true
		})
		if err == nil || n != 3 {
			t.Fatalf("PruneAudit: %d, %v; want the first batch's 3 deleted and the second's failure", n, err)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{Event: "audit_pruned"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || !strings.HasPrefix(rows[0].Detail, "deleted 3, stopped by: ") || !strings.Contains(rows[0].Detail, "o3 is kept") {
			t.Errorf("the prune's rows: %+v; want one recording the 3 rows deleted and the failure it stopped at", rows)
		}
	})
}

// A prune whose process ends between two batches leaves the row of what
// it had deleted in prune_progress. RecordUnfinishedPrunes writes it to
// the trail once the prune stood still since the time given — not while
// it may still run — and once, however many instances look at once.
func TestAnUnfinishedPruneIsRecordedOnceWhenItStoodStill(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		// The second batch fails, and the process ends where the prune
		// would write its own row.
		cutoff := oldRowsTheSecondBatchFailsOn(t, db)
		func() {
			defer func() { _ = recover() }()
			_, _ = db.PruneAudit(ctx, cutoff, 3, nil, func(deleted int64, stopped error) (AuditEvent, bool) {
				if !errors.Is(stopped, ErrPruneUnfinished) {
					panic("the process ends")
				}
				return AuditEvent{At: cutoff, Event: "audit_pruned", Outcome: "interrupted", ActorKind: "admin",
					Detail: fmt.Sprintf("deleted %d, unfinished", deleted)}, true
			})
		}()
		pruned := func() []AuditEvent {
			rows, err := db.SearchAudit(ctx, AuditFilter{Event: "audit_pruned"})
			if err != nil {
				t.Fatal(err)
			}
			return rows
		}
		if rows := pruned(); len(rows) != 0 {
			t.Fatalf("the prune killed wrote %+v", rows)
		}
		if n, err := db.RecordUnfinishedPrunes(ctx, time.Now().Add(-time.Minute)); err != nil || n != 0 {
			t.Errorf("a prune that moved a moment ago: %d recorded, %v; want none: it may still run", n, err)
		}
		var wg sync.WaitGroup
		var recorded atomic.Int64
		for range 3 {
			wg.Go(func() {
				n, err := db.RecordUnfinishedPrunes(ctx, time.Now().Add(time.Minute))
				if err != nil {
					t.Error(err)
				}
				recorded.Add(int64(n))
			})
		}
		wg.Wait()
		rows := pruned()
		if recorded.Load() != 1 || len(rows) != 1 || rows[0].Detail != "deleted 3, unfinished" || rows[0].Outcome != "interrupted" {
			t.Errorf("three instances looking at once recorded %d: %+v; want one row, of the 3 deleted", recorded.Load(), rows)
		}
	})
}

// oldRowsTheSecondBatchFailsOn writes five audit rows older than the
// cutoff it returns, o0 … o4 oldest first, of which the fourth, o3,
// cannot be deleted: a prune in batches of 3 deletes the first batch and
// fails on the second.
func oldRowsTheSecondBatchFailsOn(t *testing.T, db *DB) (cutoff time.Time) {
	t.Helper()
	cutoff = t0.Add(30 * 24 * time.Hour)
	var old []time.Time
	for i := range 5 {
		old = append(old, cutoff.Add(-time.Duration(10-i)*time.Hour))
	}
	auditAt(t, db, old...)
	refuseWith(t, db, map[string][]string{
		"sqlite": {`CREATE TRIGGER keep_o3 BEFORE DELETE ON audit_events WHEN OLD.order_id = 'o3'
			BEGIN SELECT RAISE(ABORT, 'o3 is kept'); END`},
		"postgres": {`CREATE FUNCTION keep_o3() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				IF OLD.order_id = 'o3' THEN RAISE EXCEPTION 'o3 is kept'; END IF; RETURN OLD; END $$`,
			`CREATE TRIGGER keep_o3 BEFORE DELETE ON audit_events FOR EACH ROW EXECUTE FUNCTION keep_o3()`},
	})
	return cutoff
}
