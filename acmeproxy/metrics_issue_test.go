package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// issueMetrics counts IssueFailed by reason class.
type issueMetrics struct {
	authority.NopMetrics
	mu     sync.Mutex
	failed map[string]int
}

func (m *issueMetrics) IssueFailed(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed == nil {
		m.failed = map[string]int{}
	}
	m.failed[reason]++
}

func (m *issueMetrics) failures() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.failed {
		out[k] = v
	}
	return out
}

// An operator alerts on certificates_failed_total: a delegated order that
// fails because the worker's signer kept failing until its job was
// abandoned is one failed issuance, counted once (as "abandoned", as a
// relay's or a script's abandoned order is), by the instance that failed
// it.
func TestADelegatedOrderAbandonedAfterItsSignerKeptFailingIsCountedAsOneFailedIssuance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	m := &issueMetrics{}
	newTestEnvWith(t, envOptions{dbPath: dbPath, ca: ca,
		wrap: func(l *localca.Signer) signer.Signer { return failingSigner{l} },
		opts: func(o *Options) { o.Metrics = m },
		runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond,
			Lanes: []string{signer.SigningLane("test"), signer.AnySignerLane}},
		profileHandlers: issueHandlers,
	})
	c := front.client(ctx)
	o := front.authorizedOrder(ctx, c, "failing.example.com")
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "", []string{"failing.example.com"}, nil), true); err == nil {
		t.Fatal("the order completed although its signer always fails")
	}
	id := path.Base(o.URI)
	waitUntil(t, "the signer_issue job's retirement", func() bool {
		js, _ := front.queue.List(ctx, store.JobFilter{Kind: signer.IssueKind, Key: id})
		return len(js) == 1 && js[0].Status == store.JobFailed
	})
	if got := m.failures(); len(got) != 1 || got["abandoned"] != 1 {
		t.Fatalf("failed issuances counted %v; want one, abandoned", got)
	}
}
