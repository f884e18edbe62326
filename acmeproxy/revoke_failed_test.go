package acmeproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// failingBackend issues as the local CA and revokes at a backend, by job,
// whose every attempt fails as an unreachable one does (retried); before
// failing, an attempt waits for hold when it is set.
type failingBackend struct {
	*localca.Signer
	entered chan struct{}
	hold    chan struct{}
}

func (f *failingBackend) Revoke(ctx context.Context, _ *x509.Certificate, _ *int) error {
	if f.hold != nil {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		select {
		case <-f.hold:
		case <-ctx.Done():
		}
	}
	return errors.New("dial tcp 192.0.2.1:443: connection refused")
}

func (f *failingBackend) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

// An operator's revocation whose signer_revoke job is given up while the
// request waits for it is not a fault of this server: the admin API and
// the web page say what happened to the job — a backend that kept failing
// is a 502 quoting its last error, a job an operator cancelled a 409 —
// that the certificate is not revoked, and that revoking it again queues
// a new attempt; not a 500 sending the operator to the log.
func TestAnOperatorsRevocationWhoseJobIsGivenUpWhileItWaitsSaysWhatHappened(t *testing.T) {
	tests := []struct {
		name string
		hold bool // the attempt waits, so that the job can be cancelled while it runs
		// giveUp, when set, gives the job up while the request waits.
		giveUp     func(t *testing.T, ctx context.Context, e *testEnv, order string)
		wantStatus int
		wantText   []string
	}{
		{"the backend kept failing", false, nil, http.StatusBadGateway,
			[]string{"connection refused", "is not revoked", "queues a new attempt"}},
		{"an operator cancelled the job", true, func(t *testing.T, ctx context.Context, e *testEnv, order string) {
			js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind, Key: order})
			if err != nil || len(js) != 1 {
				t.Fatalf("signer_revoke jobs: %+v (%v); want one", js, err)
			}
			if _, err := e.queue.Cancel(ctx, js[0].ID); err != nil {
				t.Fatal(err)
			}
		}, http.StatusConflict, []string{"cancelled", "is not revoked", "queues a new attempt"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			backend := &failingBackend{}
			if tc.hold {
				backend.entered, backend.hold = make(chan struct{}, 1), make(chan struct{})
			}
			e := newTestEnvWith(t, envOptions{
				opts:   func(o *Options) { o.RevokeWait = 20 * time.Second },
				wrap:   func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
				runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond},
			})
			op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
			cert := e.issue(ctx, e.client(ctx), "given-up.example.com")

			done := make(chan error, 1)
			go func() {
				_, err := op.RevokeOrder(ctx, cert.order, nil, authority.Actor{Kind: authority.ActorCLI, ID: "alice"})
				done <- err
			}()
			if tc.hold {
				select {
				case <-backend.entered:
				case <-ctx.Done():
					t.Fatal("the revocation's job never ran")
				}
				tc.giveUp(t, ctx, e, cert.order)
				close(backend.hold)
			}
			err := <-done
			status, msg := operator.Describe(err)
			if status != tc.wantStatus {
				t.Errorf("the revocation's error %q is answered %d; want %d", err, status, tc.wantStatus)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("the answer %q does not say %q", msg, w)
				}
			}
			c, gerr := e.db.CertificateOfOrder(ctx, cert.order)
			if gerr != nil || !c.RevokedAt.IsZero() {
				t.Errorf("the certificate: revoked at %v (%v); want not revoked", c.RevokedAt, gerr)
			}
		})
	}
}
