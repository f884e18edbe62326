package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestAJobInALaneIsClaimedOnlyByARunnerServingThatLane(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		laned, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "a", Lane: "signer:p", MaxAttempts: 3}, t0)
		if err != nil {
			t.Fatal(err)
		}
		open, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "b", MaxAttempts: 3}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if laned.Lane != "signer:p" || open.Lane != "" {
			t.Fatalf("lanes as stored: %q and %q", laned.Lane, open.Lane)
		}
		tests := []struct {
			name  string
			lanes []string
			want  []int64
		}{
			{"default lane only", nil, []int64{open.ID}},
			{"another lane", []string{"signer:q"}, []int64{open.ID}},
			{"its lane", []string{"signer:q", "signer:p"}, []int64{laned.ID, open.ID}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				due, err := db.AnyJobDue(ctx, "k", tt.lanes, "me", t0)
				if err != nil || !due {
					t.Fatalf("AnyJobDue = %v, %v; the default lane's job is due", due, err)
				}
				next, ok, err := db.NextJobDue(ctx, []string{"k"}, tt.lanes)
				if err != nil || !ok || !next.Equal(t0) {
					t.Fatalf("NextJobDue = %v %v %v", next, ok, err)
				}
				got, err := db.ClaimJobsIn(ctx, "k", tt.lanes, "me", t0, t0.Add(time.Minute), 10)
				if err != nil {
					t.Fatal(err)
				}
				ids := map[int64]bool{}
				for _, j := range got {
					ids[j.ID] = true
					if err := db.ReleaseJob(ctx, j.ID, "me", t0); err != nil {
						t.Fatal(err)
					}
				}
				if len(ids) != len(tt.want) {
					t.Fatalf("claimed %v, want %v", ids, tt.want)
				}
				for _, id := range tt.want {
					if !ids[id] {
						t.Fatalf("claimed %v, want %v", ids, tt.want)
					}
				}
			})
		}
		// Nothing but the laned job left: a runner not serving its lane
		// sees nothing due at all.
		if _, err := db.ClaimJobs(ctx, "k", "me", t0, t0.Add(time.Minute), 10); err != nil {
			t.Fatal(err)
		}
		if due, err := db.AnyJobDue(ctx, "k", []string{"signer:q"}, "other", t0); err != nil || due {
			t.Fatalf("AnyJobDue outside the lane = %v, %v; want false", due, err)
		}
		if _, ok, err := db.NextJobDue(ctx, []string{"k"}, nil); err != nil || !ok {
			t.Fatalf("NextJobDue: the default lane's job runs, lease until %v %v", ok, err)
		}
	})
}

func TestMovingALiveJobToAnotherLaneChangesWhoMayClaimIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "periodic", Key: "periodic", MaxAttempts: 3}, t0); err != nil {
			t.Fatal(err)
		}
		moved, err := db.MoveJobLane(ctx, "periodic", "periodic", "signer", t0)
		if err != nil || !moved {
			t.Fatalf("MoveJobLane = %v, %v", moved, err)
		}
		if again, err := db.MoveJobLane(ctx, "periodic", "periodic", "signer", t0); err != nil || again {
			t.Fatalf("a second move to the same lane = %v, %v; want nothing moved", again, err)
		}
		if got, _ := db.ClaimJobs(ctx, "periodic", "front", t0, t0.Add(time.Minute), 1); len(got) != 0 {
			t.Fatalf("a runner outside the lane claimed the moved job")
		}
		if got, _ := db.ClaimJobsIn(ctx, "periodic", []string{"signer"}, "worker", t0, t0.Add(time.Minute), 1); len(got) != 1 {
			t.Fatalf("the lane's runner claimed %d jobs, want 1", len(got))
		}
	})
}

func TestASignerPublicationIsReadBackAsPublishedAndReplacedWhole(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		if _, err := db.SignerPublished(ctx, "p"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before any publication: %v, want ErrNotFound", err)
		}
		first := SignerPublication{Profile: "p", Signer: "local_ca", Revocation: RevocationLedger,
			CAChainPEM: "-----BEGIN CERTIFICATE-----\n", CurrentIssuer: "aa",
			Issuers:   []PublishedIssuer{{KeyID: "aa", NameID: "subject:1", Subject: "CN=A", NotAfter: t0.Add(time.Hour)}},
			UpdatedAt: t0}
		if err := db.PublishSigner(ctx, first); err != nil {
			t.Fatal(err)
		}
		got, err := db.SignerPublished(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if got.Signer != "local_ca" || got.Revocation != RevocationLedger || got.CAChainPEM != first.CAChainPEM ||
			got.CurrentIssuer != "aa" || len(got.Issuers) != 1 || got.Issuers[0] != first.Issuers[0] || !got.UpdatedAt.Equal(t0) {
			t.Fatalf("read back %+v, want %+v", got, first)
		}
		second := SignerPublication{Profile: "p", Signer: "relay", Revocation: RevocationJob, UpdatedAt: t0.Add(time.Minute)}
		if err := db.PublishSigner(ctx, second); err != nil {
			t.Fatal(err)
		}
		got, err = db.SignerPublished(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if got.Signer != "relay" || got.Revocation != RevocationJob || got.CAChainPEM != "" || got.CurrentIssuer != "" || len(got.Issuers) != 0 {
			t.Fatalf("after the second publication: %+v", got)
		}
		if err := db.PublishSigner(ctx, SignerPublication{Profile: "p", Signer: "x", Revocation: "somewhere"}); err == nil {
			t.Fatal("a publication with an unknown revocation route was stored")
		}
	})
}
