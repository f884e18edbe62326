package acmeproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
)

// pendingSigner accepts every order and finishes none, with an estimate of
// the wait when estimate is set.
type pendingSigner struct {
	*localca.Signer
	estimate *time.Duration
}

func (l *pendingSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{Pending: true}, nil
}

type estimatingSigner struct{ *pendingSigner }

func (e estimatingSigner) ExpectedWait(context.Context, string) (time.Duration, bool) {
	return *e.estimate, true
}

func TestAProcessingOrderTellsTheClientToComeBackWhenItsSignerExpectsToBeDone(t *testing.T) {
	dur := func(d time.Duration) *time.Duration { return &d }
	tests := []struct {
		name     string
		estimate *time.Duration // nil: the signer gives none
		want     string
	}{
		{"ok/no estimate: a second", nil, "1"},
		{"ok/an estimate is rounded up to whole seconds", dur(2300 * time.Millisecond), "3"},
		{"ok/a wait already over: a second, never zero", dur(-time.Second), "1"},
		{"ok/a long wait is capped at ten minutes", dur(3 * time.Hour), "600"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			later := &pendingSigner{estimate: tc.estimate}
			e := newTestEnvWith(t, envOptions{wrap: func(l *localca.Signer) signer.Signer {
				later.Signer = l
				if tc.estimate == nil {
					return later
				}
				return estimatingSigner{later}
			}})
			c, o, csr := readyOrder(t, ctx, e, "later.example.com")
			r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
			var got struct{ Status string }
			_ = json.Unmarshal(r.body, &got)
			if r.status != http.StatusOK || got.Status != "processing" {
				t.Fatalf("finalize: %d %s; want a processing order", r.status, r.body)
			}
			if ra := r.header.Get("Retry-After"); ra != tc.want {
				t.Errorf("finalize: Retry-After %q; want %q", ra, tc.want)
			}
			r = e.raw(c).post(o.URI, nil, jwsOpts{})
			if ra := r.header.Get("Retry-After"); r.status != http.StatusOK || ra != tc.want {
				t.Errorf("polling the order: %d, Retry-After %q; want %q", r.status, ra, tc.want)
			}
		})
	}
}
