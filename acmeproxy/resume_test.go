package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

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
	if won, err := e.db.ClaimOrderForIssue(ctx, id, csr, store.OrderClient{}, time.Now().Add(-10*time.Minute)); err != nil || !won {
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
	if won, err := e.db.ClaimOrderForIssue(ctx, path.Base(o.URI), newCSR(t, key, "", []string{"live.example.com"}, nil), store.OrderClient{}, time.Now()); err != nil || !won {
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
				store.OrderClient{}, time.Now().Add(-10*time.Minute)); err != nil || !won {
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
