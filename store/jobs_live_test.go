package store

import (
	"context"
	"errors"
	"testing"
)

func TestTheLiveJobOfAKeyIsReadUntilItSettlesAndThenTheNextOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		if _, err := db.LiveJob(ctx, "k", "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before any job: %v; want ErrNotFound", err)
		}
		first, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "a", Payload: []byte(`{"n":1}`), MaxAttempts: 1}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "other", Key: "a", MaxAttempts: 1}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.LiveJob(ctx, "k", "a")
		if err != nil || got.ID != first.ID || string(got.Payload) != `{"n":1}` {
			t.Fatalf("live job: %+v %v; want job %d of kind k", got, err, first.ID)
		}
		if _, err := db.CancelJob(ctx, first.ID, t0); err != nil {
			t.Fatal(err)
		}
		if got, err := db.LiveJob(ctx, "k", "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after it was cancelled: %+v %v; want ErrNotFound", got, err)
		}
		second, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "a", Payload: []byte(`{"n":2}`), MaxAttempts: 1}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := db.LiveJob(ctx, "k", "a"); err != nil || got.ID != second.ID {
			t.Errorf("live job after a new one: %+v %v; want job %d", got, err, second.ID)
		}
	})
}
