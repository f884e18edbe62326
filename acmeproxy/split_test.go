package acmeproxy

import (
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"

	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/delegated"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Two instances on one store, as two processes on one database: a front
// end serving profile "test" with signer delegated (it holds no key), and
// a worker mounting the same profile with the local CA.

// issueHandlers are the signer_issue handlers every instance runs.
func issueHandlers(p authority.Profiles) []jobs.Handler {
	return []jobs.Handler{authority.DelegatedIssueJobs(p, nil)}
}

// frontEnv starts the front end on dbPath.
func frontEnv(t *testing.T, dbPath string, ca *testCA) *testEnv {
	t.Helper()
	return newTestEnvWith(t, envOptions{dbPath: dbPath, ca: ca,
		opts:            func(o *Options) { o.Signer = new(delegated.Signer) },
		runner:          jobs.RunnerOptions{PollInterval: 20 * time.Millisecond},
		profileHandlers: issueHandlers,
	})
}

// workerEnv starts a worker on dbPath, serving the signing lanes of the
// profile as the app's runner does, and publishes as the app does at
// start. wrap, when set, makes its signer from the local CA's.
func workerEnv(t *testing.T, dbPath string, ca *testCA, wrap func(*localca.Signer) signer.Signer) *testEnv {
	t.Helper()
	w := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: ca, wrap: wrap,
		runner:          jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, Lanes: []string{signer.SigningLane("test"), signer.AnySignerLane}},
		profileHandlers: issueHandlers,
	})
	if err := w.srv.Authority().Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w
}

// startFrontEnd starts a front end on a fresh database file with a fresh
// CA and returns the file and the CA for the workers the test starts: every
// split test begins with the front end alone on a database it shares.
func startFrontEnd(t *testing.T) (dbPath string, ca *testCA, front *testEnv) {
	t.Helper()
	dbPath = filepath.Join(t.TempDir(), "acme.db")
	root, src := newTestCA(t)
	ca = &testCA{root: root, src: src}
	return dbPath, ca, frontEnv(t, dbPath, ca)
}

// authorizedOrder places an order for names with c and answers its
// challenges, leaving it ready to finalize: the tests that watch what a
// finalize does on a split deployment start there.
func (e *testEnv) authorizedOrder(ctx context.Context, c *acme.Client, names ...string) *acme.Order {
	e.t.Helper()
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs(names...))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.authorize(ctx, c, o)
}

func get(t *testing.T, e *testEnv, p string) (int, []byte) {
	t.Helper()
	resp, err := e.ts.Client().Get(e.url(p))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// probeRunner proves that e's runner has claimed signer_issue jobs since
// now: it queues one in the default lane for a profile nobody mounts and
// waits until an attempt has run. A claim that took it would have taken
// any other due signer_issue job it was allowed to.
func probeRunner(t *testing.T, ctx context.Context, e *testEnv, key string) {
	t.Helper()
	probe, _, err := e.queue.Enqueue(ctx, jobs.Spec{Kind: signer.IssueKind, Key: key,
		Payload: signer.IssueJob{Profile: "nowhere", Order: key}})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the front end's runner to claim the probe", func() bool {
		j, err := e.queue.Get(ctx, probe.ID)
		return err == nil && j.LastError != ""
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAFrontEndWithoutTheSignerLeavesOrdersProcessingUntilAWorkerSignsThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)

	// Nothing published yet: the front end has no chain and no CRL to
	// serve, and says so.
	for _, p := range []string{"/ca.pem", "/crl"} {
		if code, body := get(t, front, p); code != http.StatusNotFound {
			t.Fatalf("GET %s before any worker: %d %s, want 404", p, code, body)
		}
	}

	c := front.client(ctx)
	o := front.authorizedOrder(ctx, c, "split.example.com")
	id := path.Base(o.URI)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	type result struct {
		chain [][]byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		// Finalizes, then polls the order until it is valid.
		chain, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "", []string{"split.example.com"}, nil), true)
		done <- result{chain, err}
	}()
	var js []store.Job
	waitUntil(t, "the finalize to queue the order's signer_issue job", func() bool {
		var err error
		js, err = front.queue.List(ctx, store.JobFilter{Kind: signer.IssueKind, Key: id})
		return err == nil && len(js) > 0
	})
	if len(js) != 1 {
		t.Fatalf("signer_issue jobs of the order: %d; want 1", len(js))
	}
	if got, err := front.db.GetOrder(ctx, "test", id); err != nil || got.Status != vocab.StatusProcessing {
		t.Fatalf("the finalized order is %s (%v), want processing", got.Status, err)
	}
	if js[0].Lane != signer.SigningLane("test") {
		t.Fatalf("the signer_issue job is in lane %q, want %q", js[0].Lane, signer.SigningLane("test"))
	}
	probeRunner(t, ctx, front, "probe-1")
	if j, _ := front.queue.Get(ctx, js[0].ID); j.Status != store.JobReady || j.Attempts != 0 || j.LeaseOwner != "" || j.LastError != "" {
		t.Fatalf("the front end touched the signing job: %s, attempts %d, lease %q, last error %q", j.Status, j.Attempts, j.LeaseOwner, j.LastError)
	}
	// The client is still waiting, on an order that is processing.
	select {
	case r := <-done:
		t.Fatalf("the order finished with no instance holding the signer: %v", r.err)
	default:
	}
	if got, err := c.GetOrder(ctx, o.URI); err != nil || got.Status != acme.StatusProcessing {
		t.Fatalf("the order as the front end serves it: %v %v, want processing", got, err)
	}

	// The worker starts: it claims the job and signs; the client's polling
	// ends with the certificate.
	worker := workerEnv(t, dbPath, ca, nil)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the order was not completed once the worker ran")
	}
	if r.err != nil {
		t.Fatalf("finalize through the front end: %v", r.err)
	}
	leaf, err := x509.ParseCertificate(r.chain[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.root)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "split.example.com"}); err != nil {
		t.Fatalf("the leaf does not verify against the worker's CA: %v", err)
	}
	if j, _ := worker.queue.Get(ctx, js[0].ID); j.Status != store.JobDone {
		t.Fatalf("the signer_issue job is %s, want done", j.Status)
	}

	// The chain the front end serves is what the worker published.
	code, body := get(t, front, "/ca.pem")
	if want := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.root.Raw}); code != http.StatusOK || string(body) != string(want) {
		t.Fatalf("GET ca.pem from the front end: %d\n%s\nwant the worker's chain\n%s", code, body, want)
	}
}

func TestAFrontEndRecordsALocalCARevocationAtOnceAndAWorkerSignsTheCRL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	worker := workerEnv(t, dbPath, ca, nil)
	c := front.client(ctx)
	got := front.issue(ctx, c, "revoked.example.com")

	// The worker stops; the revocation is recorded by the front end alone.
	if err := worker.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeCert(ctx, nil, got.der, acme.CRLReasonKeyCompromise); err != nil {
		t.Fatalf("revoke through the front end: %v", err)
	}
	cert, err := front.db.CertificateOfOrder(ctx, got.order)
	if err != nil {
		t.Fatal(err)
	}
	if cert.RevokedAt.IsZero() || cert.Reason == nil || *cert.Reason != 1 {
		t.Fatalf("the certificate after revoke-cert: revoked at %v, reason %v; want revoked for keyCompromise", cert.RevokedAt, cert.Reason)
	}
	if evs := auditRows(t, front.db, store.AuditFilter{Event: vocab.EventCertificateRevoked, OrderID: got.order}); len(evs) != 1 {
		t.Fatalf("certificate_revoked audit rows: %d, want 1", len(evs))
	}
	crlJobs, err := front.queue.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind})
	if err != nil || len(crlJobs) == 0 {
		t.Fatalf("crl_regenerate jobs: %d %v", len(crlJobs), err)
	}
	if crlJobs[0].Lane != signer.SigningLane("test") || crlJobs[0].Status != store.JobReady {
		t.Fatalf("the CRL job is %s in lane %q; want ready in the profile's signing lane", crlJobs[0].Status, crlJobs[0].Lane)
	}

	// The worker is back: the CRL the front end serves lists the serial.
	workerEnv(t, dbPath, ca, nil)
	crl := front.crl(lists(got.leaf.SerialNumber))
	if e, _ := entry(crl, got.leaf.SerialNumber); e.ReasonCode != 1 {
		t.Fatalf("the CRL entry's reason is %d, want keyCompromise", e.ReasonCode)
	}
	// And the CRL of the CA by its key id, which the leaf's distribution
	// point would name.
	if code, body := get(t, front, "/crl/"+signer.LeafIssuerKeyID(got.leaf)); code != http.StatusOK {
		t.Fatalf("GET crl/<key id> from the front end: %d %s", code, body)
	}
}

// jobRevoker is the local CA with a backend that must be told of a
// revocation, as a relay or a script signer is.
type jobRevoker struct {
	*localca.Signer
	mu      sync.Mutex
	revoked []string
}

func (j *jobRevoker) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

func (j *jobRevoker) Revoke(_ context.Context, cert *x509.Certificate, _ *int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.revoked = append(j.revoked, cert.SerialNumber.Text(16))
	return nil
}

func TestAFrontEndQueuesABackendRevocationForTheWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	backend := &jobRevoker{}
	workerEnv(t, dbPath, ca, func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend })
	c := front.client(ctx)
	got := front.issue(ctx, c, "backend.example.com")

	if err := c.RevokeCert(ctx, got.key, got.der, acme.CRLReasonUnspecified); err != nil {
		t.Fatalf("revoke through the front end: %v", err)
	}
	backend.mu.Lock()
	told := append([]string(nil), backend.revoked...)
	backend.mu.Unlock()
	if len(told) != 1 || told[0] != got.leaf.SerialNumber.Text(16) {
		t.Fatalf("the worker's backend was told of %v, want the one serial", told)
	}
	js, err := front.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind, Key: got.order})
	if err != nil || len(js) != 1 || js[0].Lane != signer.SigningLane("test") || js[0].Status != store.JobDone {
		t.Fatalf("signer_revoke jobs: %+v %v; want one, done, in the profile's signing lane", js, err)
	}
}

func TestAFrontEndRefusesARevocationUntilAWorkerHasPublishedWhereItGoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	// A worker that signs but has not published (it serves the signing
	// lane only, not the refresh's, and skips the start's publication).
	worker := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: ca,
		runner:          jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, Lanes: []string{signer.SigningLane("test")}},
		profileHandlers: issueHandlers,
	})
	c := front.client(ctx)
	got := front.issue(ctx, c, "unpublished.example.com")

	raw := front.raw(c)
	revoke := func() rawResponse {
		return raw.post(front.url("/revoke-cert"), map[string]string{"certificate": b64(got.der)}, jwsOpts{})
	}
	resp := revoke()
	if resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") == "" {
		t.Fatalf("revoke-cert before any publication: %d (Retry-After %q) %s; want 503 with Retry-After", resp.status, resp.header.Get("Retry-After"), resp.body)
	}
	if cert, _ := front.db.CertificateOfOrder(ctx, got.order); !cert.RevokedAt.IsZero() {
		t.Fatal("the refused revocation was recorded")
	}
	if evs := auditRows(t, front.db, store.AuditFilter{Event: vocab.EventCertificateRevoked, OrderID: got.order}); len(evs) != 0 {
		t.Fatalf("certificate_revoked audit rows after the refusal: %d", len(evs))
	}

	if err := worker.srv.Authority().Publish(ctx); err != nil {
		t.Fatal(err)
	}
	// The front end rereads the publication within a few seconds.
	waitUntil(t, "the revocation to be accepted once published", func() bool {
		return revoke().status == http.StatusOK
	})
	if cert, _ := front.db.CertificateOfOrder(ctx, got.order); cert.RevokedAt.IsZero() {
		t.Fatal("the accepted revocation was not recorded")
	}
}

// failingSigner fails every issuance on its side (not a verdict).
type failingSigner struct{ *localca.Signer }

func (failingSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{}, errors.New("the HSM is unplugged")
}

func TestADelegatedOrderWhoseSignerKeepsFailingFailsOnceItsAttemptsAreSpent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	newTestEnvWith(t, envOptions{dbPath: dbPath, ca: ca,
		wrap: func(l *localca.Signer) signer.Signer { return failingSigner{l} },
		runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond,
			Lanes: []string{signer.SigningLane("test"), signer.AnySignerLane}},
		profileHandlers: issueHandlers,
	})
	c := front.client(ctx)
	o := front.authorizedOrder(ctx, c, "failing.example.com")
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "", []string{"failing.example.com"}, nil), true)
	if err == nil {
		t.Fatal("the order completed although its signer always fails")
	}
	id := path.Base(o.URI)
	got, err := front.db.GetOrder(ctx, "test", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != vocab.StatusInvalid || !strings.Contains(string(got.Error), string(vocab.ErrorServerInternal)) || strings.Contains(string(got.Error), "HSM") {
		t.Fatalf("the order is %s with %s; want invalid with a generic serverInternal", got.Status, got.Error)
	}
	js, _ := front.queue.List(ctx, store.JobFilter{Kind: signer.IssueKind, Key: id})
	if len(js) != 1 || js[0].Status != store.JobFailed || !strings.Contains(js[0].LastError, "HSM") {
		t.Fatalf("the signer_issue job: %+v; want failed, naming the signer's fault for the operator", js)
	}
	evs := auditRows(t, front.db, store.AuditFilter{Event: vocab.EventCertificateIssueFailed, OrderID: id})
	if len(evs) != 1 || !strings.Contains(evs[0].Detail, "abandoned") {
		t.Fatalf("certificate_issue_failed rows: %+v; want one saying the delegated issuance was abandoned", evs)
	}
}

// A front end's operator (the admin API, the CLI, the web page) sees the
// CRL the front end serves, the one a worker signed, instead of being told
// that the profile's signer publishes none; a regeneration, which only an
// instance holding the key can sign, is refused as a conflict that says
// where to ask.
func TestAFrontEndsOperatorShowsTheCRLTheFrontEndServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	workerEnv(t, dbPath, ca, nil)
	c := front.client(ctx)
	got := front.issue(ctx, c, "shown.example.com")
	if err := c.RevokeCert(ctx, nil, got.der, acme.CRLReasonSuperseded); err != nil {
		t.Fatalf("revoke through the front end: %v", err)
	}
	served := front.crl(lists(got.leaf.SerialNumber))

	op := &operator.Operator{DB: front.db, Queue: front.queue, Profiles: staticProfiles{front.srv.Profile(): front.srv}}
	v, err := op.ShowCRL(ctx, front.srv.Profile())
	if err != nil {
		t.Fatalf("crl show at the front end: %v", err)
	}
	if v.Issuer != signer.LeafIssuerKeyID(got.leaf) || v.Number < served.Number.Int64() || v.Entries != len(served.RevokedCertificateEntries) {
		t.Errorf("crl show at the front end: %+v; want the CRL it serves, number %d, %d entries, of CA %s",
			v, served.Number, len(served.RevokedCertificateEntries), signer.LeafIssuerKeyID(got.leaf))
	}
	_, err = op.RegenerateCRL(ctx, front.srv.Profile(), authority.Actor{Kind: authority.ActorCLI, ID: "alice"})
	if status, msg := operator.Describe(err); status != http.StatusConflict || !strings.Contains(msg, "holding") {
		t.Errorf("crl regenerate at the front end: %d %q; want a conflict naming where to regenerate", status, msg)
	}
}

// The operator's overview of a front end (the web page's first page)
// reports the CRL the front end serves, with its health, as it does for an
// instance holding the signer, instead of "CRL: no".
func TestAFrontEndsOverviewReportsTheCRLTheFrontEndServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	op := &operator.Operator{DB: front.db, Queue: front.queue, Profiles: staticProfiles{front.srv.Profile(): front.srv}}
	ov, err := op.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ov.CRLs) != 0 || ov.Profiles[0].CRL {
		t.Fatalf("the overview before any worker published: CRLs %+v, profile %+v; want none", ov.CRLs, ov.Profiles[0])
	}

	workerEnv(t, dbPath, ca, nil)
	c := front.client(ctx)
	got := front.issue(ctx, c, "overview.example.com")
	front.crl(func(*x509.RevocationList) bool { return true })
	if ov, err = op.Overview(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ov.CRLs) != 1 || ov.CRLs[0].Error != "" || ov.CRLs[0].Issuer != signer.LeafIssuerKeyID(got.leaf) || !ov.Profiles[0].CRL {
		t.Errorf("the overview of the front end: CRLs %+v, profile %+v; want the CRL it serves, of CA %s", ov.CRLs, ov.Profiles[0], signer.LeafIssuerKeyID(got.leaf))
	}
}

// noCRLSigner is a signer that signs no CRL, as a relay or a script is:
// only the Signer interface of the local CA it wraps.
type noCRLSigner struct{ signer.Signer }

// The profiles list of a front end says the profile has a CRL when its
// workers publish one, which the front end serves from the store, rather
// than what its own delegate signer (which signs none) would say; and no
// CRL when the workers' signer signs none or no worker has published yet.
func TestAFrontEndsProfileListSaysWhetherItServesACRLItsWorkersPublish(t *testing.T) {
	tests := []struct {
		name    string
		worker  func(l *localca.Signer) signer.Signer // nil: the local CA itself
		started bool                                  // a worker has started and published
		want    bool
	}{
		{"ok/a worker with the local CA publishes its CRL", nil, true, true},
		{"ok/a worker whose signer signs no CRL publishes none", func(l *localca.Signer) signer.Signer { return noCRLSigner{l} }, true, false},
		{"ok/no worker has published yet", nil, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dbPath, ca, front := startFrontEnd(t)
			if tc.started {
				workerEnv(t, dbPath, ca, tc.worker)
			}
			op := &operator.Operator{DB: front.db, Queue: front.queue, Profiles: staticProfiles{front.srv.Profile(): front.srv}}
			profiles, err := op.ListProfiles(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(profiles) != 1 || profiles[0].Signer != "delegated" || profiles[0].CRL != tc.want {
				t.Errorf("the front end's profiles: %+v; want the delegated profile with crl %v", profiles, tc.want)
			}
		})
	}
}
