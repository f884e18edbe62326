package acmeproxy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// sjSigner is a signer that runs jobs of kind "sj_work" and records what
// the ACME layer gives and asks it.
type sjSigner struct {
	mu        sync.Mutex
	binding   signer.Binding
	ran       []int64
	abandoned []string
	recovered int
}

func (s *sjSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{Pending: true}, nil
}
func (s *sjSigner) Revoke(context.Context, *x509.Certificate, *int) error { return nil }
func (s *sjSigner) RevocationRoute() signer.RevocationRoute               { return signer.RevokeByJob }
func (s *sjSigner) Bind(b signer.Binding) error                           { s.binding = b; return nil }
func (s *sjSigner) JobKinds() []string                                    { return []string{"sj_work"} }

func (s *sjSigner) RunJob(_ context.Context, job *jobs.Job) jobs.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ran = append(s.ran, job.ID)
	return jobs.Done()
}

func (s *sjSigner) AbandonJob(_ context.Context, _ *jobs.Job, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandoned = append(s.abandoned, reason)
	return nil
}

func (s *sjSigner) RecoverJobs(context.Context, *jobs.Queue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recovered++
	return nil
}

type sjValidator struct{}

func (sjValidator) HTTP01(context.Context, string, string, string, string) error { return nil }
func (sjValidator) DNS01(context.Context, string, string) error                  { return nil }
func (sjValidator) TLSALPN01(context.Context, string, string, string) error      { return nil }

func TestSignerJobsReachTheSignerOfTheirProfileOrWait(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, nil)
	sgn := &sjSigner{}
	srv, err := NewServer(ctx, ProfileConfig{Profile: "worker"}, Options{DB: db, Queue: q, Signer: sgn, Validator: sjValidator{}})
	if err != nil {
		t.Fatal(err)
	}
	if sgn.binding.Profile != "worker" || sgn.binding.Settler != srv.Authority() || sgn.binding.Queue != q || sgn.binding.DB != db {
		t.Fatalf("binding %+v; want the profile, its authority as settler, its queue and store", sgn.binding)
	}
	local, _ := NewServer(ctx, ProfileConfig{Profile: "plain"}, Options{DB: db, Queue: q, Signer: &sjPlainSigner{}, Validator: sjValidator{}})
	profiles := staticProfiles{"worker": srv, "plain": local}

	hs := authority.SignerJobHandlers(profiles, []*authority.Authority{srv.Authority(), local.Authority()}, nil)
	if len(hs) != 1 || hs[0].Kind() != "sj_work" {
		t.Fatalf("handlers %v; want one for sj_work", hs)
	}
	h := hs[0]
	if err := h.Recover(ctx, q); err != nil || sgn.recovered != 1 {
		t.Errorf("recover: %v, signer recovered %d times; want once", err, sgn.recovered)
	}
	job := func(profile string) *jobs.Job {
		payload, _ := json.Marshal(map[string]string{"profile": profile})
		return &jobs.Job{ID: 7, Kind: "sj_work", Payload: payload}
	}
	if out := h.Run(ctx, job("worker")).String(); out != "done" || len(sgn.ran) != 1 {
		t.Errorf("mounted profile: %s, signer ran %v", out, sgn.ran)
	}
	for profile, why := range map[string]string{
		"elsewhere": "profile elsewhere is not mounted",
		"plain":     "the signer of profile plain does not run sj_work jobs",
	} {
		out := h.Run(ctx, job(profile)).String()
		if !strings.HasPrefix(out, "retry after 30s: ") || !strings.Contains(out, why) {
			t.Errorf("%s: %s; want a retry after 30s saying %q", profile, out, why)
		}
	}
	for _, profile := range []string{"worker", "elsewhere"} {
		if err := h.Abandon(ctx, job(profile), "deadline passed"); err != nil {
			t.Errorf("abandoning the job of %s: %v", profile, err)
		}
	}
	if len(sgn.abandoned) != 1 || sgn.abandoned[0] != "deadline passed" {
		t.Errorf("abandoned %v; want the mounted profile's job only", sgn.abandoned)
	}
}

// sjPlainSigner runs no jobs.
type sjPlainSigner struct{}

func (sjPlainSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{}, nil
}
func (sjPlainSigner) Revoke(context.Context, *x509.Certificate, *int) error { return nil }
func (sjPlainSigner) RevocationRoute() signer.RevocationRoute               { return signer.RevokeInLedger }
