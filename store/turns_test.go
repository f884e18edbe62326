package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// settle gives a goroutine just started time to block on entering turns
// before the next one starts: a channel does not say who waits on it, and
// the order they block in is the order under test.
func settle() { time.Sleep(50 * time.Millisecond) }

func TestWritesWaitingForAPostgresConnectionGetItInTheOrderTheyAsked(t *testing.T) {
	const pool, waiters = 2, 5
	tr := make(turns, pool)
	ctx := context.Background()
	for range pool {
		if err := tr.enter(ctx); err != nil {
			t.Fatal(err)
		}
	}
	served := make(chan int, waiters)
	for i := range waiters {
		go func() {
			if err := tr.enter(ctx); err != nil {
				t.Error(err)
				return
			}
			served <- i
		}()
		settle()
	}
	for want := range waiters {
		tr.leave() // a connection comes back: the longest waiter gets it
		select {
		case got := <-served:
			if got != want {
				t.Fatalf("connection %d went to waiter %d, want %d (the one that asked first)", want, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no waiter got connection %d", want)
		}
	}
}

func TestAWriteWhoseContextEndsWhileWaitingForAConnectionGivesUpAndTakesNoTurn(t *testing.T) {
	tr := make(turns, 1)
	if err := tr.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := tr.enter(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("enter with an ended context: %v, want context.DeadlineExceeded", err)
	}
	tr.leave()
	// The turn given back is free for the next write: the one that gave up
	// holds none.
	next, cancelNext := context.WithTimeout(context.Background(), time.Second)
	defer cancelNext()
	if err := tr.enter(next); err != nil {
		t.Fatalf("the next write waits for a turn nobody holds: %v", err)
	}
}
