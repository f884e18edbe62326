package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestRunNowRunsTheJobInPlaceAndReportsItSettled(t *testing.T) {
	q := NewQueue(openDB(t, ""), nil)
	ran := make(chan int, 1)
	h := newFuncHandler("k", func(_ context.Context, j *Job) Outcome { ran <- j.Attempts; return Done() })
	startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
	job, done, err := q.RunNow(context.Background(), Spec{Kind: "k", Key: "x"}, 5*time.Second)
	if err != nil || !done {
		t.Fatalf("RunNow: done=%v err=%v", done, err)
	}
	if a := <-ran; a != 1 {
		t.Errorf("ran as attempt %d, want 1", a)
	}
	if got, _ := q.Get(context.Background(), job.ID); got.Status != store.JobDone {
		t.Errorf("job is %s, want done", got.Status)
	}
}

func TestRunNowWithoutALocalRunnerQueuesTheJob(t *testing.T) {
	q := NewQueue(openDB(t, ""), nil)
	job, done, err := q.RunNow(context.Background(), Spec{Kind: "k"}, time.Second)
	if err != nil || done || job.Status != store.JobReady {
		t.Fatalf("RunNow: %+v done=%v err=%v; want a ready job", job, done, err)
	}
}

func TestRunNowDoesNotWaitBeyondItsBoundButTheJobFinishes(t *testing.T) {
	q := NewQueue(openDB(t, ""), nil)
	release := make(chan struct{})
	h := newFuncHandler("k", func(context.Context, *Job) Outcome { <-release; return Done() })
	startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
	job, done, err := q.RunNow(context.Background(), Spec{Kind: "k"}, 20*time.Millisecond)
	if err != nil || done {
		t.Fatalf("RunNow: done=%v err=%v; want not done yet", done, err)
	}
	close(release)
	waitStatus(t, q, job.ID, store.JobDone)
}

func TestRunNowGivesALiveJobWithTheSameKeyBackUnrun(t *testing.T) {
	q := NewQueue(openDB(t, ""), nil)
	h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
	startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
	first, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k", Key: "same", Delay: time.Hour})
	got, done, err := q.RunNow(context.Background(), Spec{Kind: "k", Key: "same"}, time.Second)
	if err != nil || done || got.ID != first.ID {
		t.Fatalf("RunNow: id %d done=%v err=%v; want the live job %d, not run", got.ID, done, err, first.ID)
	}
}
