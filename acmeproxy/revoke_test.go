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
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// issued is a certificate a test obtained.
type issued struct {
	der   []byte // the leaf
	leaf  *x509.Certificate
	key   *ecdsa.PrivateKey // its key
	order string            // its order id
}

// issue has c obtain a certificate for names.
func (e *testEnv) issue(ctx context.Context, c *acme.Client, names ...string) issued {
	e.t.Helper()
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs(names...))
	if err != nil {
		e.t.Fatalf("new order: %v", err)
	}
	o = e.authorize(ctx, c, o)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	chain, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(e.t, key, names[0], names, nil), true)
	if err != nil {
		e.t.Fatalf("finalize: %v", err)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		e.t.Fatal(err)
	}
	return issued{der: chain[0], leaf: leaf, key: key, order: path.Base(o.URI)}
}

// raw returns a rawClient speaking for c's account.
func (e *testEnv) raw(c *acme.Client) *rawClient {
	return &rawClient{t: e.t, e: e, key: c.Key, kid: string(c.KID)}
}

// crl fetches the served CRL until accept holds of it (CRLs are rebuilt by
// a job), checks it against the issuing CA and zlint, and returns it. The
// wait is generous: on a machine loaded by other test packages a rebuild
// on PostgreSQL once took longer than 10 s (it returns as soon as the CRL
// is what accept wants).
func (e *testEnv) crl(accept func(*x509.RevocationList) bool) *x509.RevocationList {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := e.ts.Client().Get(e.url("/crl"))
		if err != nil {
			e.t.Fatal(err)
		}
		der, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if ct := resp.Header.Get("Content-Type"); ct != "application/pkix-crl" {
				e.t.Fatalf("CRL content type %q", ct)
			}
			crl, err := x509.ParseRevocationList(der)
			if err != nil {
				e.t.Fatalf("the served CRL does not parse: %v", err)
			}
			if err := crl.CheckSignatureFrom(e.root); err != nil {
				e.t.Fatalf("the CRL is not signed by the issuing CA: %v", err)
			}
			if accept(crl) {
				lintcheck.CRL(e.t, der, nil)
				return crl
			}
		} else if resp.StatusCode != http.StatusServiceUnavailable {
			e.t.Fatalf("GET crl: %d %s", resp.StatusCode, der)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the served CRL never became what the test waits for\n%s", e.crlState())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crlState describes what builds the CRL, for a wait that failed: the
// CRL jobs, the CAs whose stored CRL lacks revocations of the ledger, and
// the stored CRL of the CA the profile issues from.
func (e *testEnv) crlState() string {
	ctx := context.Background()
	var b strings.Builder
	const at = "15:04:05.000"
	for _, kind := range []string{authority.CRLRegenerateKind, authority.CRLRefreshKind} {
		js, err := e.db.ListJobs(ctx, store.JobFilter{Kind: kind})
		fmt.Fprintf(&b, "%s jobs (%v):\n", kind, err)
		for _, j := range js {
			fmt.Fprintf(&b, "  #%d %s, attempts %d/%d, run_at %s, updated %s, last error %q\n",
				j.ID, j.Status, j.Attempts, j.MaxAttempts, j.RunAt.Format(at), j.UpdatedAt.Format(at), j.LastError)
		}
	}
	stale, err := e.db.StaleCRLIssuers(ctx)
	fmt.Fprintf(&b, "CAs whose CRL lacks revocations: %v (%v)\n", stale, err)
	if iss, err := e.srv.Authority().CurrentIssuer(ctx); err == nil {
		c, err := e.db.GetCRLInfo(ctx, iss.KeyID)
		fmt.Fprintf(&b, "stored CRL %d, thisUpdate %s, stored %s, ledger_seq %d, %d entries (%v); now %s",
			c.Number, c.ThisUpdate.Format(at), c.UpdatedAt.Format(at), c.LedgerSeq, c.Entries, err, time.Now().Format(at))
	}
	return b.String()
}

// entry finds serial in crl.
func entry(crl *x509.RevocationList, serial *big.Int) (x509.RevocationListEntry, bool) {
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(serial) == 0 {
			return e, true
		}
	}
	return x509.RevocationListEntry{}, false
}

func lists(serials ...*big.Int) func(*x509.RevocationList) bool {
	return func(crl *x509.RevocationList) bool {
		for _, s := range serials {
			if _, ok := entry(crl, s); !ok {
				return false
			}
		}
		return true
	}
}

func auditRows(t *testing.T, db *store.DB, f store.AuditFilter) []store.AuditEvent {
	t.Helper()
	evs, err := db.SearchAudit(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestRevokeCertByEachAuthorizedRequesterAndTheCRLListsIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e := newTestEnv(t, nil)
		owner := e.client(ctx)
		holder := e.client(ctx) // will hold authorizations for the same names
		keyCompromise, superseded, cessation := 1, 4, 5

		tests := []struct {
			name      string
			revoke    func(c issued) error
			reason    *int
			wantActor string
		}{
			{"ok/the ordering account (kid)", func(c issued) error {
				return owner.RevokeCert(ctx, nil, c.der, acme.CRLReasonKeyCompromise)
			}, &keyCompromise, authority.ActorAccount},
			{"ok/the certificate's own key (jwk)", func(c issued) error {
				return owner.RevokeCert(ctx, c.key, c.der, acme.CRLReasonSuperseded)
			}, &superseded, authority.ActorCertificateKey},
			{"ok/an account with valid authorizations for every name", func(c issued) error {
				e.issue(ctx, holder, c.leaf.DNSNames...) // proves the names
				return holder.RevokeCert(ctx, nil, c.der, acme.CRLReasonCessationOfOperation)
			}, &cessation, authority.ActorAccount},
			{"ok/no reason at all", func(c issued) error {
				r := e.raw(owner).post(e.url("/revoke-cert"), map[string]string{"certificate": b64(c.der)}, jwsOpts{})
				if r.status != http.StatusOK {
					return fmt.Errorf("%d %s", r.status, r.body)
				}
				return nil
			}, nil, authority.ActorAccount},
		}
		var serials []*big.Int
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := e.issue(ctx, owner, fmt.Sprintf("r%d.example.com", i))
				if err := tc.revoke(c); err != nil {
					t.Fatalf("revoke: %v", err)
				}
				serials = append(serials, c.leaf.SerialNumber)
				crl := e.crl(lists(c.leaf.SerialNumber))
				got, _ := entry(crl, c.leaf.SerialNumber)
				want := 0
				if tc.reason != nil {
					want = *tc.reason
				}
				if got.ReasonCode != want {
					t.Errorf("CRL reason %d; want %d", got.ReasonCode, want)
				}
				stored, err := e.db.CertificateOfOrder(ctx, c.order)
				if err != nil {
					t.Fatal(err)
				}
				if stored.RevokedAt.IsZero() || (tc.reason == nil) != (stored.Reason == nil) || (tc.reason != nil && *stored.Reason != *tc.reason) {
					t.Errorf("stored revocation %v reason %v; want revoked with %v", stored.RevokedAt, stored.Reason, tc.reason)
				}
				rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateRevoked, OrderID: c.order})
				if len(rows) != 1 || rows[0].ActorKind != tc.wantActor || rows[0].Serial != stored.Serial || rows[0].ClientIP != "127.0.0.1" {
					t.Errorf("audit rows %+v; want one certificate_revoked by %s from 127.0.0.1", rows, tc.wantActor)
				}
			})
		}

		t.Run("fail/a deactivated account's key no longer revokes even its own certificate", func(t *testing.T) {
			c := e.client(ctx)
			cert := e.issue(ctx, c, "deactivated.example.com")
			if err := c.DeactivateReg(ctx); err != nil {
				t.Fatal(err)
			}
			err := c.RevokeCert(ctx, nil, cert.der, acme.CRLReasonAffiliationChanged)
			var ae *acme.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized || ae.ProblemType != string(vocab.ErrorUnauthorized) {
				t.Fatalf("revoke by a deactivated account: %v; want 401 %s (RFC 8555 §7.3.6)", err, vocab.ErrorUnauthorized)
			}
			stored, err := e.db.CertificateOfOrder(ctx, cert.order)
			if err != nil {
				t.Fatal(err)
			}
			if !stored.RevokedAt.IsZero() {
				t.Fatal("the certificate was revoked by a deactivated account's key")
			}
			// The certificate's own key still revokes it.
			if err := c.RevokeCert(ctx, cert.key, cert.der, acme.CRLReasonAffiliationChanged); err != nil {
				t.Fatalf("revoke by the certificate's key: %v", err)
			}
			e.crl(lists(cert.leaf.SerialNumber))
		})

		t.Run("fail/a deactivated account's authorizations no longer let it revoke another's certificate", func(t *testing.T) {
			other := e.client(ctx)
			cert := e.issue(ctx, owner, "held.example.com")
			e.issue(ctx, other, "held.example.com") // other now holds valid authorizations for the name
			if err := other.DeactivateReg(ctx); err != nil {
				t.Fatal(err)
			}
			if err := other.RevokeCert(ctx, nil, cert.der, acme.CRLReasonKeyCompromise); err == nil {
				t.Fatal("a deactivated account revoked a certificate it did not order")
			}
			stored, err := e.db.CertificateOfOrder(ctx, cert.order)
			if err != nil {
				t.Fatal(err)
			}
			if !stored.RevokedAt.IsZero() {
				t.Fatal("the certificate was revoked")
			}
		})

		t.Run("ok/the CRL is RFC 5280 and cRLNumber grows", func(t *testing.T) {
			first := e.crl(lists(serials...))
			if first.Number == nil || first.Number.Sign() <= 0 {
				t.Fatalf("cRLNumber %v", first.Number)
			}
			if !first.NextUpdate.After(first.ThisUpdate) || first.NextUpdate.Sub(first.ThisUpdate) != authority.CRLValidity {
				t.Errorf("thisUpdate %v nextUpdate %v", first.ThisUpdate, first.NextUpdate)
			}
			if _, err := e.srv.Authority().RegenerateCRL(ctx); err != nil {
				t.Fatal(err)
			}
			second := e.crl(func(c *x509.RevocationList) bool { return c.Number.Cmp(first.Number) > 0 })
			if len(second.RevokedCertificateEntries) != len(first.RevokedCertificateEntries) {
				t.Errorf("a regeneration changed the entries: %d → %d", len(first.RevokedCertificateEntries), len(second.RevokedCertificateEntries))
			}
		})
	})
}

func TestRevokeCertRefusalsAreAuditedAndTellAStrangerNothing(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e := newTestEnv(t, nil)
		owner := e.client(ctx)
		cert := e.issue(ctx, owner, "mine.example.com")
		revoked := e.issue(ctx, owner, "gone.example.com")
		if err := owner.RevokeCert(ctx, nil, revoked.der, acme.CRLReasonSuperseded); err != nil {
			t.Fatal(err)
		}
		stranger := e.rawClient()
		stranger.register()
		own := e.raw(owner)

		// A certificate of another CA with the serial of one issued here, and
		// one with a serial never issued here.
		forge := func(serial *big.Int) []byte {
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "mine.example.com"},
				DNSNames: []string{"mine.example.com"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
			if err != nil {
				t.Fatal(err)
			}
			return der
		}
		mismatched := forge(cert.leaf.SerialNumber)
		unknown := forge(big.NewInt(0x5eed))
		otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		revoke := func(c *rawClient, der []byte, reason any, o jwsOpts) func() rawResponse {
			return func() rawResponse {
				p := map[string]any{"certificate": b64(der)}
				if reason != nil {
					p["reason"] = reason
				}
				return c.post(e.url("/revoke-cert"), p, o)
			}
		}

		notYoursAnswer := func() rawResponse { return revoke(stranger, cert.der, 1, jwsOpts{})() }()
		if notYoursAnswer.status != http.StatusForbidden || notYoursAnswer.problem == nil || notYoursAnswer.problem.Type != vocab.ErrorUnauthorized {
			t.Fatalf("a stranger's revocation: %d %s; want 403 unauthorized", notYoursAnswer.status, notYoursAnswer.body)
		}

		tests := []struct {
			name           string
			do             func() rawResponse
			wantStatus     int
			wantType       vocab.ProblemType
			sameAsNotYours bool // the answer must be byte for byte the stranger's
			wantAudit      bool
		}{
			{"fail/a stranger's account", revoke(stranger, cert.der, 1, jwsOpts{}), 403, vocab.ErrorUnauthorized, true, true},
			{"fail/an unknown serial", revoke(own, unknown, 1, jwsOpts{}), 403, vocab.ErrorUnauthorized, true, true},
			{"fail/a leaf whose bytes differ from the stored one", revoke(own, mismatched, 1, jwsOpts{}), 403, vocab.ErrorUnauthorized, true, true},
			// A bare key that is not the certificate's names no one: its
			// refusal is summarized, not audited on a row of its own (see
			// TestRefusalsOfRequestersNoOneKnowsWriteOneSummaryRowPerSourceAndInterval).
			{"fail/signed by another key as jwk: no row of its own", revoke(own, cert.der, 1, jwsOpts{embedJWK: true, key: otherKey}), 403, vocab.ErrorUnauthorized, true, false},
			{"fail/a stranger on a revoked certificate learns nothing", revoke(stranger, revoked.der, 1, jwsOpts{}), 403, vocab.ErrorUnauthorized, true, true},
			{"fail/reason 7 is not a CRLReason", revoke(own, cert.der, 7, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/reason 11 is not a CRLReason", revoke(own, cert.der, 11, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/a negative reason", revoke(own, cert.der, -1, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/reason 8 (removeFromCRL) would leave the certificate trusted", revoke(own, cert.der, 8, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/reason 2 (cACompromise) is not a subscriber's to state", revoke(own, cert.der, 2, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/reason 6 (certificateHold) is never released here", revoke(own, cert.der, 6, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/reason 9 (privilegeWithdrawn) is the operator's", revoke(own, cert.der, 9, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/reason 10 (aACompromise) is not a subscriber's to state", revoke(own, cert.der, 10, jwsOpts{}), 400, vocab.ErrorBadRevocationReason, false, true},
			{"fail/already revoked, by its owner", revoke(own, revoked.der, 1, jwsOpts{}), 400, vocab.ErrorAlreadyRevoked, false, true},
			{"fail/already revoked, by its key", revoke(own, revoked.der, nil, jwsOpts{embedJWK: true, key: revoked.key}), 400, vocab.ErrorAlreadyRevoked, false, true},
			{"fail/a certificate that is not base64url", func() rawResponse {
				return own.post(e.url("/revoke-cert"), map[string]any{"certificate": "!!"}, jwsOpts{})
			}, 400, vocab.ErrorMalformed, false, true},
			{"fail/a certificate that is not DER", revoke(own, []byte("not a certificate"), nil, jwsOpts{}), 400, vocab.ErrorMalformed, false, true},
			{"fail/a reason that is not a number", revoke(own, cert.der, "one", jwsOpts{}), 400, vocab.ErrorMalformed, false, true},
			{"fail/POST-as-GET", func() rawResponse { return own.post(e.url("/revoke-cert"), nil, jwsOpts{}) }, 400, vocab.ErrorMalformed, false, true},
			{"fail/signed by nobody known: no audit row", func() rawResponse {
				return own.post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der)}, jwsOpts{kid: e.url("/account/nope")})
			}, 400, vocab.ErrorAccountDoesNotExist, false, false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := len(auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationRefused, Limit: 1000}))
				r := tc.do()
				if r.status != tc.wantStatus || r.problem == nil || r.problem.Type != tc.wantType {
					t.Fatalf("got %d %s; want %d %s", r.status, r.body, tc.wantStatus, tc.wantType)
				}
				if tc.sameAsNotYours && (r.status != notYoursAnswer.status || string(r.body) != string(notYoursAnswer.body)) {
					t.Errorf("answer %d %s differs from the stranger's %d %s", r.status, r.body, notYoursAnswer.status, notYoursAnswer.body)
				}
				after := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationRefused, Limit: 1000})
				switch {
				case tc.wantAudit && len(after) != before+1:
					t.Errorf("%d refusal rows written; want 1", len(after)-before)
				case !tc.wantAudit && len(after) != before:
					t.Errorf("%d refusal rows written; want none", len(after)-before)
				case tc.wantAudit && (after[0].Outcome != authority.OutcomeRefused || after[0].Reason != string(tc.wantType) || after[0].Detail == ""):
					t.Errorf("refusal row %+v", after[0])
				}
			})
		}

		// The stranger's refusal names the certificate's order, for the operator.
		rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationRefused, OrderID: cert.order})
		found := false
		for _, r := range rows {
			if r.ActorKind == authority.ActorAccount && r.ActorID == path.Base(stranger.kid) && r.Serial == hex.EncodeToString(cert.leaf.SerialNumber.Bytes()) {
				found = true
			}
		}
		if !found {
			t.Errorf("no refusal row names the stranger and the certificate: %+v", rows)
		}
		if c, _ := e.db.CertificateOfOrder(ctx, cert.order); !c.RevokedAt.IsZero() {
			t.Errorf("a refused revocation revoked the certificate")
		}
	})
}

func TestAClientAndAnOperatorRevokingAtOnceRecordOneRevocation(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e := newTestEnv(t, nil)
		owner := e.client(ctx)
		op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
		raw := e.raw(owner)
		const clientReason, operatorReason = 1, 4
		// Rounds race the two doors at once, or let one finish first, so that
		// each door is seen winning and the loser's answer is checked both
		// ways.
		const (
			together = iota
			clientFirst
			operatorFirst
		)
		wins := map[string]int{}
		for round := range 9 {
			order := round % 3
			cert := e.issue(ctx, owner, fmt.Sprintf("race%d.example.com", round))
			var (
				wg               sync.WaitGroup
				start            = make(chan struct{})
				clientErr, opErr error
				nonce            = raw.nonce()
				clientDone       = make(chan struct{})
				opDone           = make(chan struct{})
			)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer close(clientDone)
				<-start
				if order == operatorFirst {
					<-opDone
				}
				// Not owner.RevokeCert: x/crypto/acme reports alreadyRevoked
				// as success.
				r := raw.post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": clientReason}, jwsOpts{nonce: &nonce})
				if r.status != http.StatusOK {
					clientErr = r.problem
					if r.problem == nil {
						clientErr = fmt.Errorf("%d %s", r.status, r.body)
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer close(opDone)
				<-start
				if order == clientFirst {
					<-clientDone
				}
				reason := operatorReason
				_, opErr = op.RevokeOrder(ctx, cert.order, &reason, authority.Actor{Kind: authority.ActorAdmin, ID: "test"})
			}()
			close(start)
			wg.Wait()

			p, _ := problem.As(clientErr)
			clientLost := p != nil && p.Type == vocab.ErrorAlreadyRevoked
			opLost := errors.Is(opErr, authority.ErrAlreadyRevoked) && errors.Is(opErr, operator.ErrConflict)
			winner, want := "", 0
			switch {
			case clientErr == nil && opLost:
				winner, want = "client", clientReason
			case opErr == nil && clientLost:
				winner, want = "operator", operatorReason
			default:
				t.Fatalf("round %d: client %v, operator %v; want one success and one alreadyRevoked", round, clientErr, opErr)
			}
			wins[winner]++
			stored, err := e.db.CertificateOfOrder(ctx, cert.order)
			if err != nil {
				t.Fatal(err)
			}
			if stored.Reason == nil || *stored.Reason != want {
				t.Errorf("round %d: the %s won but the stored reason is %v; want %d", round, winner, stored.Reason, want)
			}
			if rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateRevoked, OrderID: cert.order}); len(rows) != 1 {
				t.Errorf("round %d: %d certificate_revoked rows; want 1", round, len(rows))
			}
			crl := e.crl(lists(cert.leaf.SerialNumber))
			if got, _ := entry(crl, cert.leaf.SerialNumber); got.ReasonCode != want {
				t.Errorf("round %d: CRL reason %d; want the winner's %d", round, got.ReasonCode, want)
			}
		}
		if wins["client"] < 3 || wins["operator"] < 3 {
			t.Errorf("winners %v; want each door to win at least the 3 rounds it went first", wins)
		}
	})
}

func TestTheCRLListsARevocationACrashLeftWithoutItsJob(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dbPath := newPlace(t)
		first := newTestEnvWith(t, envOptions{dbPath: dbPath})
		c := first.client(ctx)
		cert := first.issue(ctx, c, "crash.example.com")
		before := first.crl(func(crl *x509.RevocationList) bool { return true })

		// The revocation reaches the ledger, then the process dies before
		// its crl_regenerate job runs: the ledger is written directly and the
		// runner stopped without a job queued. A job the issuance queued is
		// run first (on a slow machine it may still wait), so that none is
		// left to list the serial in the restarted process's place.
		queued := func() int {
			js, err := first.queue.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Status: store.JobReady})
			if err != nil {
				t.Fatal(err)
			}
			return len(js)
		}
		for queued() != 0 {
			if ctx.Err() != nil {
				t.Fatal("the issuance's crl_regenerate job never ran")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := first.runner.Stop(); err != nil {
			t.Fatal(err)
		}
		stored, err := first.db.CertificateOfOrder(ctx, cert.order)
		if err != nil {
			t.Fatal(err)
		}
		reason, now := 1, time.Now()
		if _, err := first.db.RevokeCertificate(ctx, store.Revocation{
			CertificateID: stored.ID, Profile: stored.Profile, OrderID: stored.OrderID, Serial: stored.Serial,
			IssuerKeyID: signerIssuer(t, first), Reason: &reason, RevokedAt: now, NotAfter: stored.NotAfter, ActorKind: authority.ActorAdmin,
		}, store.AuditEvent{At: now, Event: vocab.EventCertificateRevoked, Outcome: authority.OutcomeSuccess, Profile: stored.Profile,
			ActorKind: authority.ActorAdmin, OrderID: stored.OrderID, AccountID: stored.AccountID, Serial: stored.Serial}); err != nil {
			t.Fatal(err)
		}
		if queued() != 0 {
			t.Fatalf("a crl_regenerate job is queued; the crash must leave none")
		}
		first.ts.Close()
		first.db.Close()

		// The restarted process, on the same database and CA, serves a CRL
		// with the serial, numbered above every CRL before the crash.
		second := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: first.ca})
		after := second.crl(lists(cert.leaf.SerialNumber))
		if after.Number.Cmp(before.Number) <= 0 {
			t.Errorf("cRLNumber %v after the restart is not above %v", after.Number, before.Number)
		}
	})
}

func signerIssuer(t *testing.T, e *testEnv) string {
	t.Helper()
	cs, _ := e.srv.Authority().CRLSigner()
	id, err := cs.CRLIssuer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}
