package store

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

func TestEventsPerHourCountsEachEventInTheHourItHappened(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	at := []struct {
		event string
		at    time.Time
	}{
		{acme.EventCertificateIssued, t0.Add(-time.Minute)}, // before since: not counted
		{acme.EventCertificateIssued, t0.Add(10 * time.Minute)},
		{acme.EventCertificateIssued, t0.Add(59 * time.Minute)},
		{acme.EventCertificateIssueFailed, t0.Add(30 * time.Minute)},
		{acme.EventCertificateIssued, t0.Add(2*time.Hour + time.Second)},
		{acme.EventAccountCreated, t0.Add(time.Minute)}, // not asked for
	}
	for _, a := range at {
		if err := db.InsertAudit(ctx, AuditEvent{At: a.at, Event: a.event, Outcome: "success"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.EventsPerHour(ctx, t0, acme.EventCertificateIssued, acme.EventCertificateIssueFailed)
	if err != nil {
		t.Fatal(err)
	}
	want := []EventHour{
		{acme.EventCertificateIssueFailed, t0, 1},
		{acme.EventCertificateIssued, t0, 2},
		{acme.EventCertificateIssued, t0.Add(2 * time.Hour), 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Event != want[i].Event || !got[i].Hour.Equal(want[i].Hour) || got[i].Count != want[i].Count {
			t.Errorf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A kind's oldest waiting job is the one due the longest, counted from
// when it fell due: a ready job due later (a periodic row, ready again
// after each round and as old as the first start; a job in its backoff)
// is scheduled, not waiting, however long ago it was created.
func TestOldestReadyJobsIsWhenTheLongestWaitingDueJobOfEachKindFellDue(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(time.Hour)
		for _, j := range []struct {
			kind         string
			created, due time.Time
		}{
			{"crl", t0.Add(-30 * 24 * time.Hour), now.Add(time.Hour)}, // created a month ago, next round in an hour
			{"notify", t0, t0.Add(20 * time.Minute)},
			{"notify", t0.Add(time.Minute), t0.Add(10 * time.Minute)}, // created later, due sooner
			{"notify", t0.Add(-time.Hour), now.Add(time.Minute)},      // the oldest, in its backoff
		} {
			if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: j.kind, RunAt: j.due, MaxAttempts: 3}, j.created); err != nil {
				t.Fatal(err)
			}
		}
		got, err := db.OldestReadyJobs(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]time.Time{"notify": t0.Add(10 * time.Minute)}
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for k, w := range want {
			if !got[k].Equal(w) {
				t.Errorf("%s: waiting since %s, want %s", k, got[k], w)
			}
		}
	})
}
