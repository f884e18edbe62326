package acmeproxy

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"

	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/delegated"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// renewingCA is a root with an intermediate the test renews under the
// same name with a new key, as Caddy's pki app renews its intermediate (or
// an operator replaces an imported CA).
type renewingCA struct {
	root    *x509.Certificate
	rootKey crypto.Signer

	mu    sync.Mutex
	inter *x509.Certificate
	key   crypto.Signer
}

func newRenewingCA(t testing.TB, now time.Time) *renewingCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "acmeproxy renewing root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	r := &renewingCA{rootKey: key}
	r.root, _ = x509.ParseCertificate(der)
	r.renew(t, now, now.Add(48*time.Hour))
	return r
}

// renew makes a new intermediate, same name, new key, the one that issues
// from now on, and returns it.
func (r *renewingCA) renew(t testing.TB, notBefore, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "acmeproxy renewing intermediate"},
		NotBefore: notBefore.Add(-time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.root, key.Public(), r.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	inter, _ := x509.ParseCertificate(der)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inter, r.key = inter, key
	return inter
}

func (r *renewingCA) current() *x509.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inter
}

func (r *renewingCA) source(context.Context) (localca.Issuer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return localca.Issuer{Chain: []*x509.Certificate{r.inter, r.root}, Key: r.key}, nil
}

// withStorage makes the profile's signer a local CA over ca keeping its
// CAs in storage, as the Caddy module does with Caddy's storage.
func withStorage(t testing.TB, ca *renewingCA, storage localca.Storage) func(*localca.Signer) signer.Signer {
	return func(*localca.Signer) signer.Signer {
		s, err := localca.New(ca.source, localca.Options{Lifetime: 24 * time.Hour, Storage: storage})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

const rotationCRLBase = "http://crl.example.test/acme/test/crl"

// issuerCRL fetches the CRL a leaf's distribution point names (served at
// <prefix>/crl/<key id>) until accept holds of it, checks it is signed by
// ca and lints clean, and returns its DER and parsed form.
func (e *testEnv) issuerCRL(leaf *x509.Certificate, ca *x509.Certificate, accept func(*x509.RevocationList) bool) ([]byte, *x509.RevocationList) {
	e.t.Helper()
	if len(leaf.CRLDistributionPoints) != 1 || !strings.HasPrefix(leaf.CRLDistributionPoints[0], rotationCRLBase+"/") {
		e.t.Fatalf("the leaf's CRL distribution points %q are not below %s", leaf.CRLDistributionPoints, rotationCRLBase)
	}
	target := e.url("/crl/" + path.Base(leaf.CRLDistributionPoints[0]))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := e.ts.Client().Get(target)
		if err != nil {
			e.t.Fatal(err)
		}
		der, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			crl, err := x509.ParseRevocationList(der)
			if err != nil {
				e.t.Fatalf("the CRL at %s does not parse: %v", target, err)
			}
			if err := crl.CheckSignatureFrom(ca); err != nil {
				e.t.Fatalf("the CRL at %s is not signed by the CA that issued the leaf: %v", target, err)
			}
			if accept(crl) {
				lintcheck.CRL(e.t, der, nil)
				return der, crl
			}
		case http.StatusServiceUnavailable:
		default:
			e.t.Fatalf("GET %s: %d %s", target, resp.StatusCode, der)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the CRL at %s never became what the test waits for", target)
		}
	}
}

func TestRevocationsOfLeavesFromARenewedCAReachTheirOwnCAsCRL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := newRenewingCA(t, time.Now())
	e := newTestEnvWith(t, envOptions{
		ca:     &testCA{root: ca.root, src: ca.source},
		mutate: func(c *ProfileConfig) { c.CRLURL = rotationCRLBase },
	})
	c := e.client(ctx)
	oldCA := ca.current()
	oldRevoked, oldKept := e.issue(ctx, c, "old-revoked.example.com"), e.issue(ctx, c, "old-kept.example.com")
	var lastOld store.CRL
	for range 3 {
		crl, err := e.srv.Authority().RegenerateCRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lastOld = crl
	}

	newCA := ca.renew(t, time.Now(), time.Now().Add(72*time.Hour))
	newRevoked, newKept := e.issue(ctx, c, "new-revoked.example.com"), e.issue(ctx, c, "new-kept.example.com")
	if oldRevoked.leaf.CRLDistributionPoints[0] == newRevoked.leaf.CRLDistributionPoints[0] {
		t.Fatalf("leaves of two CAs name one CRL, %s", oldRevoked.leaf.CRLDistributionPoints[0])
	}
	// The renewed CA's first CRL continues the name's sequence.
	firstNew, err := e.srv.Authority().RegenerateCRL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if firstNew.Number <= lastOld.Number {
		t.Errorf("the renewed CA's first cRLNumber is %d, not above %d, the last under its name (RFC 5280 §5.2.3)", firstNew.Number, lastOld.Number)
	}

	raw := e.raw(c)
	for _, rv := range []struct {
		cert   issued
		reason int
	}{{oldRevoked, 1}, {newRevoked, 4}} {
		if r := raw.post(e.url("/revoke-cert"), map[string]any{"certificate": b64(rv.cert.der), "reason": rv.reason}, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("revoking %s: %d %s", rv.cert.leaf.Subject.CommonName, r.status, r.body)
		}
	}
	oldDER, oldCRL := e.issuerCRL(oldRevoked.leaf, oldCA, lists(oldRevoked.leaf.SerialNumber))
	newDER, newCRL := e.issuerCRL(newRevoked.leaf, newCA, lists(newRevoked.leaf.SerialNumber))
	if _, ok := entry(oldCRL, newRevoked.leaf.SerialNumber); ok {
		t.Error("the old CA's CRL lists a leaf of the new CA")
	}
	if _, ok := entry(newCRL, oldRevoked.leaf.SerialNumber); ok {
		t.Error("the new CA's CRL lists a leaf of the old CA")
	}
	if oldCRL.Number.Int64() <= firstNew.Number {
		t.Errorf("the old CA's CRL after the renewal is numbered %v, not above the name's %d", oldCRL.Number, firstNew.Number)
	}

	// <prefix>/crl, where leaves without a per-CA point look, serves the
	// current CA's CRL.
	resp, err := e.ts.Client().Get(e.url("/crl"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if crl, err := x509.ParseRevocationList(body); err != nil || crl.CheckSignatureFrom(newCA) != nil {
		t.Errorf("GET /crl: %d, %v; want the current CA's CRL", resp.StatusCode, err)
	}
	for _, id := range []string{"00ff00ff", "not-a-key-id"} {
		if r := e.plain(http.MethodGet, e.url("/crl/"+id)); r.status != http.StatusNotFound {
			t.Errorf("GET /crl/%s: %d; want 404", id, r.status)
		}
	}

	t.Run("openssl verify -crl_check", func(t *testing.T) {
		openssl := lookOpenSSL(t)
		dir := t.TempDir()
		root := writePEM(t, dir, "root.pem", "CERTIFICATE", ca.root.Raw)
		for _, tc := range []struct {
			name    string
			leaf    issued
			ca      *x509.Certificate
			crl     []byte
			revoked bool
		}{
			{"fail/the old CA's revoked leaf", oldRevoked, oldCA, oldDER, true},
			{"ok/the old CA's other leaf", oldKept, oldCA, oldDER, false},
			{"fail/the new CA's revoked leaf", newRevoked, newCA, newDER, true},
			{"ok/the new CA's other leaf", newKept, newCA, newDER, false},
		} {
			name := strings.NewReplacer("/", "-", " ", "-", "'", "").Replace(tc.name)
			inter := writePEM(t, dir, name+"-ca.pem", "CERTIFICATE", tc.ca.Raw)
			crl := writePEM(t, dir, name+"-crl.pem", "X509 CRL", tc.crl)
			leaf := writePEM(t, dir, name+"-leaf.pem", "CERTIFICATE", tc.leaf.der)
			out, err := exec.CommandContext(ctx, openssl, "verify", "-crl_check", "-CAfile", root, "-untrusted", inter,
				"-CRLfile", crl, leaf).CombinedOutput()
			switch {
			case tc.revoked && (err == nil || !strings.Contains(string(out), "certificate revoked")):
				t.Errorf("%s: openssl verify -crl_check: %v; want it rejected as revoked\n%s", tc.name, err, out)
			case !tc.revoked && err != nil:
				t.Errorf("%s: openssl verify -crl_check: %v; want it accepted\n%s", tc.name, err, out)
			}
		}
	})
}

// lookOpenSSL returns openssl's path, or skips (fails with ACMEPROXY_E2E=1).
func lookOpenSSL(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("openssl")
	if err == nil {
		return p
	}
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatal("openssl is not on PATH; ACMEPROXY_E2E=1 requires it")
	}
	t.Skip("skipping the openssl check: openssl is not on PATH (apt-get install --no-install-recommends openssl)")
	return ""
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// unreadable is storage whose records cannot be read.
type unreadable struct{ localca.Storage }

func (unreadable) Load(context.Context, string) ([]byte, error) {
	return nil, errors.New("storage backend unreachable")
}

func (unreadable) List(context.Context, string, bool) ([]string, error) {
	return nil, errors.New("storage backend unreachable")
}

func TestARevocationNoCRLCanListIsRefusedAndNothingIsRecorded(t *testing.T) {
	tests := []struct {
		name string
		// storage after the restart, given the storage before
		storage    func(before localca.Storage) localca.Storage
		status     int
		detail     string
		retryAfter bool
		operator   error // what the operator's revocation wraps
		// the status the operator's fronts answer it with: asking
		// again cannot succeed (409), or may later (503)
		operatorStatus int
	}{
		{"ok/the storage the CA was kept in: the revocation reaches its CRL",
			func(before localca.Storage) localca.Storage { return before }, http.StatusOK, "", false, nil, 0},
		{"fail/storage without the CA: refused, 500",
			func(localca.Storage) localca.Storage { return &certmagic.FileStorage{Path: t.TempDir()} },
			http.StatusInternalServerError, "no longer holds the CA", false, operator.ErrConflict, http.StatusConflict},
		{"fail/the CA's key cannot be read now: refused, 503 with Retry-After",
			func(before localca.Storage) localca.Storage { return unreadable{before} },
			http.StatusServiceUnavailable, "cannot be reached now", true, signer.ErrIssuerUnavailable, http.StatusServiceUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dbPath := filepath.Join(t.TempDir(), "acme.db")
			ca := newRenewingCA(t, time.Now())
			storage := &certmagic.FileStorage{Path: t.TempDir()}
			first := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: &testCA{root: ca.root, src: ca.source},
				wrap: withStorage(t, ca, storage), mutate: func(c *ProfileConfig) { c.CRLURL = rotationCRLBase }})
			oldCA := ca.current()
			cert := first.issue(ctx, first.client(ctx), "before-renewal.example.com")
			other := first.issue(ctx, first.client(ctx), "also-before-renewal.example.com")
			if err := first.runner.Stop(); err != nil {
				t.Fatal(err)
			}
			first.ts.Close()
			first.db.Close()

			// The CA is renewed; the process restarts.
			ca.renew(t, time.Now(), time.Now().Add(72*time.Hour))
			second := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: &testCA{root: ca.root, src: ca.source},
				wrap: withStorage(t, ca, tc.storage(storage)), mutate: func(c *ProfileConfig) { c.CRLURL = rotationCRLBase }})
			byKey := &rawClient{t: t, e: second, key: cert.key}
			r := byKey.post(second.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 1}, jwsOpts{embedJWK: true})
			if r.status != tc.status {
				t.Fatalf("revoke-cert: %d %s; want %d", r.status, r.body, tc.status)
			}
			op := &operator.Operator{DB: second.db, Queue: second.queue, Profiles: staticProfiles{second.srv.Profile(): second.srv}}
			_, opErr := op.RevokeOrder(ctx, other.order, nil, authority.Actor{Kind: authority.ActorAdmin, ID: "test"})
			if tc.status == http.StatusOK {
				if opErr != nil {
					t.Fatalf("the operator's revocation: %v", opErr)
				}
				second.issuerCRL(cert.leaf, oldCA, lists(cert.leaf.SerialNumber, other.leaf.SerialNumber))
				return
			}

			if r.problem == nil || r.problem.Type != acme.ErrorServerInternal || !strings.Contains(r.problem.Detail, tc.detail) ||
				!strings.Contains(r.problem.Detail, "nothing was recorded") {
				t.Errorf("problem %+v; want serverInternal saying %q and that nothing was recorded", r.problem, tc.detail)
			}
			if got := r.header.Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("Retry-After %q; want one: %v", r.header.Get("Retry-After"), tc.retryAfter)
			}
			if !errors.Is(opErr, authority.ErrUnpublishable) || !errors.Is(opErr, tc.operator) {
				t.Errorf("the operator's revocation: %v; want authority.ErrUnpublishable and %v", opErr, tc.operator)
			}
			if status, msg := operator.Describe(opErr); status != tc.operatorStatus || strings.Contains(msg, "storage backend unreachable") {
				t.Errorf("the operator's revocation is answered %d %q; want %d, without the storage's own error", status, msg, tc.operatorStatus)
			}
			for _, c := range []issued{cert, other} {
				if got, err := second.db.CertificateOfOrder(ctx, c.order); err != nil || !got.RevokedAt.IsZero() {
					t.Errorf("certificate of %s: revoked at %v, %v; want it unrevoked", c.order, got.RevokedAt, err)
				}
				if rows := auditRows(t, second.db, store.AuditFilter{Event: acme.EventCertificateRevoked, OrderID: c.order}); len(rows) != 0 {
					t.Errorf("%d certificate_revoked rows for %s; want none", len(rows), c.order)
				}
			}
			if stale, err := second.db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
				t.Errorf("ledger issuers without a CRL %v, %v; want no ledger row", stale, err)
			}
			if rows := auditRows(t, second.db, store.AuditFilter{Event: acme.EventRevocationRefused, OrderID: cert.order}); len(rows) != 1 {
				t.Errorf("%d revocation_refused rows; want the refusal audited", len(rows))
			}
		})
	}
}

func TestCRLJobsEndWithTheirCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)

	// A revocation's job may wait no longer than its CA's certificate.
	c := e.client(ctx)
	cert := e.issue(ctx, c, "deadline.example.com")
	if r := e.raw(c).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der)}, jwsOpts{}); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Key: signer.CAKeyID(e.root)})
	if err != nil || len(js) == 0 {
		t.Fatalf("crl_regenerate jobs %v, %v; want the revocation's", js, err)
	}
	for _, j := range js {
		if !j.Deadline.Equal(e.root.NotAfter) {
			t.Errorf("job %d has deadline %v; want the CA's notAfter %v", j.ID, j.Deadline, e.root.NotAfter)
		}
	}

	// A job for a CA the profile has no record of (queued before the CA
	// was lost, or by an older version without a deadline) fails at once.
	job, _, err := e.queue.Enqueue(ctx, jobs.Spec{Kind: authority.CRLRegenerateKind, Key: "00ff00ff",
		Payload: map[string]string{"profile": e.srv.Profile(), "issuer": "00ff00ff"}, MaxAttempts: 12})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := e.queue.Get(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == store.JobFailed {
			if got.Attempts != 1 || !strings.Contains(got.LastError, "no record of CA 00ff00ff") {
				t.Errorf("the job failed after %d attempts with %q; want one attempt naming the unknown CA", got.Attempts, got.LastError)
			}
			break
		}
		if got.Status != store.JobReady && got.Status != store.JobRunning || time.Now().After(deadline) {
			t.Fatalf("the job for an unknown CA is %s after %d attempts (%q); want it failed", got.Status, got.Attempts, got.LastError)
		}
	}
}

func TestTheRefreshKeepsARetiredCAsCRLUntilTheCAExpires(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	clk := clocktest.New(start)
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, clk)
	ca := newRenewingCA(t, start)
	oldCA := ca.renew(t, start, start.Add(authority.CRLRefreshAge+2*time.Hour)) // short-lived
	sgn, err := localca.New(ca.source, localca.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(ctx, ProfileConfig{Profile: "p"}, Options{DB: db, Queue: q, Signer: sgn, Validator: sjValidator{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	queued := func() []string {
		js, err := q.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Status: store.JobReady})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, j := range js {
			keys = append(keys, j.Key)
			if _, err := q.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(keys)
		return keys
	}
	if _, err := s.Authority().RegenerateCRL(ctx); err != nil { // the old CA's, as the current one's
		t.Fatal(err)
	}
	newCA := ca.renew(t, start, start.Add(72*time.Hour))
	oldID, newID := signer.CAKeyID(oldCA), signer.CAKeyID(newCA)

	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil {
		t.Fatal(err)
	}
	if got := queued(); len(got) != 1 || got[0] != newID {
		t.Fatalf("after the renewal, jobs for %v; want one for the new CA %s, which has no CRL yet", got, newID)
	}
	if _, err := s.Authority().RegenerateCRL(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(authority.CRLRefreshAge + time.Minute)
	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil {
		t.Fatal(err)
	}
	if got, want := queued(), slices.Sorted(slices.Values([]string{oldID, newID})); !slices.Equal(got, want) {
		t.Fatalf("with both CRLs old, jobs for %v; want both CAs %v", got, want)
	}
	clk.Advance(2 * time.Hour)
	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil {
		t.Fatal(err)
	}
	if got := queued(); len(got) != 1 || got[0] != newID {
		t.Errorf("once the old CA expired, jobs for %v; want only the new CA %s", got, newID)
	}
}

// The CAs in service — whose CRLs the metrics' gauge reports — are the
// issuing CA and each earlier one until it expires: an expired CA's CRL,
// refreshed no more, is not among them.
func TestTheCAsInServiceEndWithTheirCertificate(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	clk := clocktest.New(start)
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ca := newRenewingCA(t, start)
	oldCA := ca.renew(t, start, start.Add(2*time.Hour))
	sgn, err := localca.New(ca.source, localca.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(ctx, ProfileConfig{Profile: "p"}, Options{DB: db, Queue: jobs.NewQueue(db, clk), Signer: sgn, Validator: sjValidator{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authority().RegenerateCRL(ctx); err != nil { // the old CA signs, and is remembered
		t.Fatal(err)
	}
	newCA := ca.renew(t, start, start.Add(72*time.Hour))
	oldID, newID := signer.CAKeyID(oldCA), signer.CAKeyID(newCA)
	inService := func() []string {
		t.Helper()
		issuers, err := s.Authority().CRLIssuersInService(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, iss := range issuers {
			ids = append(ids, iss.KeyID)
		}
		slices.Sort(ids)
		return ids
	}
	if got, want := inService(), slices.Sorted(slices.Values([]string{oldID, newID})); !slices.Equal(got, want) {
		t.Fatalf("after the renewal, CAs in service %v; want both %v", got, want)
	}
	clk.Advance(3 * time.Hour)
	if got := inService(); !slices.Equal(got, []string{newID}) {
		t.Errorf("once the old CA expired, CAs in service %v; want only the new CA %s", got, newID)
	}
}

// The first leaf a CA signs — on a new server, or after Caddy renewed its
// intermediate — names its CA's CRL, and that CRL is there the moment the
// certificate is: a relying party that checks revocation (openssl verify
// -crl_check) does not refuse the leaf until the periodic refresh
// publishes it. Another instance on the same store serves it too, and so
// does a front end serving the profile without its signer, which read
// what the signer published before the CA was renewed.
func TestTheFirstLeafOfACANamesACRLThatIsServedAtOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		place := newPlace(t)
		ca := newRenewingCA(t, time.Now())
		storage := &certmagic.FileStorage{Path: t.TempDir()}
		env := func() *testEnv {
			return newTestEnvWith(t, envOptions{dbPath: place, ca: &testCA{root: ca.root, src: ca.source},
				wrap: withStorage(t, ca, storage), mutate: func(c *ProfileConfig) { c.CRLURL = rotationCRLBase }})
		}
		issuing, other := env(), env()
		front := newTestEnvWith(t, envOptions{dbPath: place, ca: &testCA{root: ca.root, src: ca.source},
			opts: func(o *Options) { o.Signer = new(delegated.Signer) }})
		c := issuing.client(ctx)
		tests := []struct {
			name  string
			renew bool
		}{
			{"ok/the first leaf of a new server", false},
			{"ok/the first leaf after the CA is renewed", true},
		}
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if tc.renew {
					ca.renew(t, time.Now(), time.Now().Add(72*time.Hour))
				}
				inter := ca.current()
				got := issuing.issue(ctx, c, fmt.Sprintf("first-%d.example.com", i))
				leaf := got.leaf
				if len(leaf.CRLDistributionPoints) != 1 || leaf.CRLDistributionPoints[0] != rotationCRLBase+"/"+signer.CAKeyID(inter) {
					t.Fatalf("the leaf's CRL distribution points %q; want the CRL of its CA %s", leaf.CRLDistributionPoints, signer.CAKeyID(inter))
				}
				for _, inst := range []struct {
					name string
					e    *testEnv
				}{{"the issuing instance", issuing}, {"another instance", other}, {"a front end without the signer", front}} {
					p := "/crl/" + path.Base(leaf.CRLDistributionPoints[0])
					code, der := get(t, inst.e, p)
					if code != http.StatusOK {
						t.Fatalf("GET %s from %s right after the certificate was issued: %d %s; want 200 and the CRL", p, inst.name, code, der)
					}
					crl, err := x509.ParseRevocationList(der)
					if err != nil {
						t.Fatalf("the CRL %s serves does not parse: %v", inst.name, err)
					}
					if err := crl.CheckSignatureFrom(inter); err != nil {
						t.Fatalf("the CRL %s serves is not signed by the leaf's CA: %v", inst.name, err)
					}
					lintcheck.CRL(t, der, nil)
					// What a relying party that checks revocation makes of it.
					dir := t.TempDir()
					out, err := exec.CommandContext(ctx, lookOpenSSL(t), "verify", "-crl_check",
						"-CAfile", writePEM(t, dir, "root.pem", "CERTIFICATE", ca.root.Raw),
						"-untrusted", writePEM(t, dir, "ca.pem", "CERTIFICATE", inter.Raw),
						"-CRLfile", writePEM(t, dir, "crl.pem", "X509 CRL", der),
						writePEM(t, dir, "leaf.pem", "CERTIFICATE", got.der)).CombinedOutput()
					if err != nil {
						t.Errorf("openssl verify -crl_check of the leaf with the CRL %s serves: %v\n%s", inst.name, err, out)
					}
				}
			})
		}
	})
}

// crlFaultySigner is the local CA, unable to sign a CRL while faults > 0
// (the CA's key momentarily unreadable, say).
type crlFaultySigner struct {
	*localca.Signer
	faults atomic.Int32
}

func (f *crlFaultySigner) fault() error {
	if f.faults.Load() > 0 {
		return errors.New("the CA's key cannot be read now")
	}
	return nil
}

func (f *crlFaultySigner) SignCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList) ([]byte, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Signer.SignCRL(ctx, issuerKeyID, tmpl)
}

func (f *crlFaultySigner) SignEncodedCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList, entries [][]byte) ([]byte, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Signer.SignEncodedCRL(ctx, issuerKeyID, tmpl, entries)
}

// A leaf whose CA's first CRL cannot be published is not handed out: the
// order stays processing, as after any fault on our side, and the resume
// sweep issues it once the CRL can be signed, with the CRL served.
func TestALeafWhoseCRLCannotBePublishedIsNotHandedOut(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		fake := clocktest.New(time.Now())
		ca := newRenewingCA(t, time.Now())
		sg := &crlFaultySigner{}
		e := newTestEnvWith(t, envOptions{ca: &testCA{root: ca.root, src: ca.source},
			wrap:   func(l *localca.Signer) signer.Signer { sg.Signer = l; return sg },
			opts:   func(o *Options) { o.Clock = fake },
			mutate: func(c *ProfileConfig) { c.CRLURL = rotationCRLBase }})
		e.issue(ctx, e.client(ctx), "before-renewal.example.com")

		inter := ca.renew(t, time.Now(), time.Now().Add(72*time.Hour))
		sg.faults.Store(1)
		c, o, csr := readyOrder(t, ctx, e, "unpublished-crl.example.com")
		r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
		var got struct{ Status, Certificate string }
		_ = json.Unmarshal(r.body, &got)
		if r.status != http.StatusOK || got.Status != "processing" || got.Certificate != "" {
			t.Fatalf("finalize while the new CA's CRL cannot be signed: %d %s; want 200 and a processing order without a certificate", r.status, r.body)
		}
		id := path.Base(o.URI)
		if cert, err := e.db.CertificateOfOrder(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a certificate was recorded (%s, %v) whose CRL nobody can fetch", cert.Serial, err)
		}

		sg.faults.Store(0)
		fake.Advance(authority.StuckAfter + time.Minute)
		if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 1 {
			t.Fatalf("resume: %d %v; want the order resumed", n, err)
		}
		after, err := c.GetOrder(ctx, o.URI)
		if err != nil || after.Status != "valid" || after.CertURL == "" {
			t.Fatalf("the order once the CRL can be signed: %+v %v; want valid with a certificate", after, err)
		}
		chain, err := c.FetchCert(ctx, after.CertURL, false)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(chain[0])
		if err != nil {
			t.Fatal(err)
		}
		p := "/crl/" + path.Base(leaf.CRLDistributionPoints[0])
		code, der := get(t, e, p)
		if code != http.StatusOK {
			t.Fatalf("GET %s right after the certificate was issued: %d %s; want 200", p, code, der)
		}
		if crl, err := x509.ParseRevocationList(der); err != nil || crl.CheckSignatureFrom(inter) != nil {
			t.Fatalf("the CRL the leaf names does not parse or is not its CA's: %v", err)
		}
	})
}

// After the CA's key changed, the earlier CA's CRL is still published
// and refreshed until that CA expires: the operator's overview (the web
// page's first page) lists it beside the current CA's, each with its CA,
// rather than the current one alone.
func TestTheOverviewListsTheCRLOfEveryCAInService(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	clk := clocktest.New(start)
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, clk)
	ca := newRenewingCA(t, start)
	oldCA := ca.current()
	sgn, err := localca.New(ca.source, localca.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(ctx, ProfileConfig{Profile: "p"}, Options{DB: db, Queue: q, Signer: sgn, Validator: sjValidator{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authority().RegenerateCRL(ctx); err != nil { // the old CA's, as the current one's
		t.Fatal(err)
	}
	newCA := ca.renew(t, start, start.Add(72*time.Hour))
	if _, err := s.Authority().RegenerateCRL(ctx); err != nil {
		t.Fatal(err)
	}
	oldID, newID := signer.CAKeyID(oldCA), signer.CAKeyID(newCA)
	op := &operator.Operator{DB: db, Queue: q, Profiles: staticProfiles{"p": s}, Clock: clk}
	ov, err := op.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ov.CRLs {
		got = append(got, c.Issuer+" "+c.Error)
	}
	if want := []string{newID + " ", oldID + " "}; !slices.Equal(got, want) {
		t.Errorf("the overview's CRLs (issuer, error): %q; want the current CA's, then the earlier one's, neither in error: %q", got, want)
	}
}
