package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/incarnation"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestAnOrderACrashLeftProcessingIsFinishedByTheResumeSweep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs("crash.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	o = e.authorize(ctx, c, o)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr := newCSR(t, key, "", []string{"crash.example.com"}, nil)

	// The finalize that claimed this order died before signing: the claim
	// is all that reached the database, ten minutes ago.
	id := path.Base(o.URI)
	if won, err := e.db.ClaimOrderForIssue(ctx, id, csr, store.OrderClient{}, "", time.Now().Add(-10*time.Minute)); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 1 {
		t.Fatalf("resume: %d %v; want 1 order resumed", n, err)
	}
	got, err := c.GetOrder(ctx, o.URI)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != acme.StatusValid || got.CertURL == "" {
		t.Fatalf("order after resume: %s, certificate %q; want valid with a certificate", got.Status, got.CertURL)
	}
	ders, err := c.FetchCert(ctx, got.CertURL, true)
	if err != nil || len(ders) == 0 {
		t.Fatalf("fetch: %v", err)
	}
	// A second sweep finds nothing: the order is settled.
	if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 0 {
		t.Fatalf("second resume: %d %v; want nothing to do", n, err)
	}
}

func TestAnOrderStillBeingFinalizedIsNotResumed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	o, _ := c.AuthorizeOrder(ctx, acme.DomainIDs("live.example.com"))
	o = e.authorize(ctx, c, o)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if won, err := e.db.ClaimOrderForIssue(ctx, path.Base(o.URI), newCSR(t, key, "", []string{"live.example.com"}, nil), store.OrderClient{}, "", time.Now()); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 0 {
		t.Fatalf("resume took %d orders (%v) that a live finalize just claimed", n, err)
	}
}

// The resume sweep issues by the order's certificate profile as finalize
// would, and fails an order whose certificate profile a reload removed.
func TestTheResumeSweepAppliesTheOrdersCertificateProfile(t *testing.T) {
	tests := []struct {
		name        string
		dropProfile bool
		wantStatus  string
	}{
		{name: "ok/the client profile's leaf has clientAuth only", wantStatus: acme.StatusValid},
		{name: "fail/a removed profile fails the order", dropProfile: true, wantStatus: acme.StatusInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dbPath := filepath.Join(t.TempDir(), "acme.db")
			e := newTestEnvWith(t, envOptions{dbPath: dbPath, mutate: certProfiles})
			c := e.client(ctx)
			o, err := c.AuthorizeOrder(ctx, acme.DomainIDs("resume.example.com"), acme.WithOrderIssuanceProfile("client"))
			if err != nil {
				t.Fatal(err)
			}
			o = e.authorize(ctx, c, o)
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if won, err := e.db.ClaimOrderForIssue(ctx, path.Base(o.URI), newCSR(t, key, "", []string{"resume.example.com"}, nil),
				store.OrderClient{}, "",
				time.Now().Add(-10*time.Minute)); err != nil || !won {
				t.Fatalf("claim: %v %v", won, err)
			}
			sweeper := e
			if tc.dropProfile {
				sweeper = newTestEnvWith(t, envOptions{dbPath: dbPath, ca: e.ca, mutate: func(cfg *ProfileConfig) {
					certProfiles(cfg)
					delete(cfg.CertificateProfiles, "client")
				}})
			}
			if n, err := sweeper.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 1 {
				t.Fatalf("resume: %d %v; want 1 order resumed", n, err)
			}
			got, err := e.db.GetOrder(ctx, "test", path.Base(o.URI))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Status) != tc.wantStatus {
				t.Fatalf("order after resume is %s, want %s", got.Status, tc.wantStatus)
			}
			if tc.dropProfile {
				if !strings.Contains(string(got.Error), "invalidProfile") {
					t.Errorf("order error = %s, want invalidProfile", got.Error)
				}
				return
			}
			ders, err := c.FetchCert(ctx, e.url("/cert/"+got.CertificateID), true)
			if err != nil || len(ders) == 0 {
				t.Fatalf("fetch: %v", err)
			}
			leaf, err := x509.ParseCertificate(ders[0])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || leaf.Subject.CommonName != "" {
				t.Errorf("leaf EKU %v CN %q, want clientAuth only and no CN", leaf.ExtKeyUsage, leaf.Subject.CommonName)
			}
		})
	}
}

// A finalize cut by a crash leaves its order processing, claimed by the
// process that died. The process started after it (on the same SQLite
// file, or on PostgreSQL on the same host) sees that claimer has exited
// and resumes the order at once: a client such as certbot, which gives up
// on a processing order after 90 s, sees it valid. An order claimed by a
// process still running — another instance, a slow finalize — is left to
// it until StuckAfter, however the restart looks at it.
func TestARestartedProcessResumesAtOnceTheOrdersItsCrashedPredecessorClaimed(t *testing.T) {
	tests := []struct {
		name string
		// claimer registers the process that claimed the order in dir
		// and returns its id.
		claimer    func(t *testing.T, dir string) string
		wantStatus vocab.Status
	}{
		{name: "ok/a claimer that has exited", wantStatus: vocab.StatusValid,
			claimer: func(t *testing.T, dir string) string {
				// What a process killed with SIGKILL leaves: its file,
				// whose lock the kernel dropped with it.
				const id = "host:4242:0123456789abcdef01234567"
				if err := os.WriteFile(filepath.Join(dir, id+".lock"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return id
			}},
		{name: "ok/a claimer still running keeps its order", wantStatus: vocab.StatusProcessing,
			claimer: func(t *testing.T, dir string) string {
				live := incarnation.New(dir, time.Hour)
				if err := live.Register(); err != nil {
					t.Fatal(err)
				}
				return live.Self()
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx := context.Background()
				dir := t.TempDir()
				restarted := incarnation.New(dir, time.Hour)
				clk := clocktest.New(time.Now())
				e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock, o.Incarnation = clk, restarted }})
				if err := restarted.Register(); err != nil {
					t.Fatal(err)
				}
				alice := e.rawClient()
				alice.register()
				o := alice.readyOrder("cut.example.com")
				// The finalize claimed the order a moment ago, then its
				// process stopped answering.
				id := path.Base(o.url)
				claimer := tc.claimer(t, dir)
				if won, err := e.db.ClaimOrderForIssue(ctx, id, newCSR(t, newKey(t), "", []string{"cut.example.com"}, nil),
					store.OrderClient{}, claimer, clk.Now()); err != nil || !won {
					t.Fatalf("claim: %v %v", won, err)
				}
				clk.Advance(2 * time.Second)

				// What the restarted process does at start (app.go:
				// resumeOrphans, then the resume sweep).
				exited, err := restarted.Exited()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.srv.Authority().ResumeOrphanedOrders(ctx, exited); err != nil {
					t.Fatal(err)
				}
				if _, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil {
					t.Fatal(err)
				}
				got := decodeAs[orderJSON](t, alice.read(o.url))
				if got.Status != tc.wantStatus {
					t.Fatalf("2s after the claim, at the restart, the order is %s (error %s); want %s", got.Status, got.Error, tc.wantStatus)
				}
				if tc.wantStatus != vocab.StatusProcessing {
					return
				}
				// The last resort: a claim StuckAfter old is resumed,
				// whoever made it.
				clk.Advance(authority.StuckAfter)
				if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 1 {
					t.Fatalf("resume sweep StuckAfter after the claim: %d %v; want the order resumed", n, err)
				}
				if got := decodeAs[orderJSON](t, alice.read(o.url)); got.Status != vocab.StatusValid {
					t.Fatalf("after the resume sweep the order is %s; want valid", got.Status)
				}
			})
		})
	}
}
