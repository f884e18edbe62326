package acmeproxy

import (
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"

	"context"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestAnOperatorChangesARevocationReasonToKeyCompromiseAndTheCRLShowsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	owner := e.client(ctx)
	op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
	admin := authority.Actor{Kind: authority.ActorAdmin, ID: "test"}
	cert := e.issue(ctx, owner, "compromised.example.com")
	if err := owner.RevokeCert(ctx, nil, cert.der, acme.CRLReasonSuperseded); err != nil {
		t.Fatal(err)
	}
	first := e.crl(lists(cert.leaf.SerialNumber))
	if got, _ := entry(first, cert.leaf.SerialNumber); got.ReasonCode != 4 {
		t.Fatalf("CRL reason %d before the change; want 4 (superseded)", got.ReasonCode)
	}

	keyCompromise := 1
	res, err := op.RevokeOrder(ctx, cert.order, &keyCompromise, admin)
	if err != nil {
		t.Fatalf("the operator's change to keyCompromise: %v", err)
	}
	if res.Certificate.Reason == nil || *res.Certificate.Reason != 1 {
		t.Errorf("answered reason %v; want 1", res.Certificate.Reason)
	}
	second := e.crl(func(c *x509.RevocationList) bool {
		got, ok := entry(c, cert.leaf.SerialNumber)
		return ok && got.ReasonCode == 1
	})
	if second.Number.Cmp(first.Number) <= 0 {
		t.Errorf("cRLNumber %v after the change, %v before; want it to grow", second.Number, first.Number)
	}
	if got, _ := entry(second, cert.leaf.SerialNumber); !got.RevocationTime.Equal(mustEntry(t, first, cert.leaf.SerialNumber).RevocationTime) {
		t.Errorf("the change moved the revocation time to %v", got.RevocationTime)
	}
	stored, err := e.db.CertificateOfOrder(ctx, cert.order)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Reason == nil || *stored.Reason != 1 {
		t.Errorf("stored reason %v; want 1", stored.Reason)
	}
	rev, err := e.db.RevocationOf(ctx, stored.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rev.Reason == nil || *rev.Reason != 1 {
		t.Errorf("ledger reason %v; want 1", rev.Reason)
	}
	rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationReasonChanged, OrderID: cert.order})
	if len(rows) != 1 || rows[0].ActorKind != authority.ActorAdmin || rows[0].Reason != "1" || rows[0].Serial != stored.Serial {
		t.Errorf("audit rows %+v; want one revocation_reason_changed by admin with reason 1", rows)
	}

	t.Run("fail/a second change to keyCompromise is already done", func(t *testing.T) {
		if _, err := op.RevokeOrder(ctx, cert.order, &keyCompromise, admin); !errors.Is(err, authority.ErrAlreadyRevoked) {
			t.Fatalf("err %v; want authority.ErrAlreadyRevoked", err)
		}
	})
	t.Run("fail/an operator cannot change the reason to anything else", func(t *testing.T) {
		other := e.issue(ctx, owner, "other-reason.example.com")
		if err := owner.RevokeCert(ctx, nil, other.der, acme.CRLReasonSuperseded); err != nil {
			t.Fatal(err)
		}
		cessation := 5
		if _, err := op.RevokeOrder(ctx, other.order, &cessation, admin); !errors.Is(err, authority.ErrAlreadyRevoked) {
			t.Fatalf("err %v; want authority.ErrAlreadyRevoked", err)
		}
	})
	t.Run("fail/a client's keyCompromise on a revoked certificate changes nothing", func(t *testing.T) {
		other := e.issue(ctx, owner, "client-change.example.com")
		if err := owner.RevokeCert(ctx, nil, other.der, acme.CRLReasonSuperseded); err != nil {
			t.Fatal(err)
		}
		r := e.raw(owner).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(other.der), "reason": 1}, jwsOpts{})
		if r.problem == nil || r.problem.Type != "urn:ietf:params:acme:error:alreadyRevoked" {
			t.Fatalf("got %d %s; want alreadyRevoked", r.status, r.body)
		}
		c, err := e.db.CertificateOfOrder(ctx, other.order)
		if err != nil {
			t.Fatal(err)
		}
		if c.Reason == nil || *c.Reason != 4 {
			t.Errorf("stored reason %v; want 4 unchanged", c.Reason)
		}
	})
}

func TestTheOperatorMayGivePrivilegeWithdrawnButNotRemoveFromCRL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	owner := e.client(ctx)
	op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
	admin := authority.Actor{Kind: authority.ActorAdmin, ID: "test"}
	tests := []struct {
		name    string
		reason  int
		wantErr error
	}{
		{"ok/9 privilegeWithdrawn", 9, nil},
		{"fail/8 removeFromCRL", 8, authority.ErrBadRevocationReason},
		{"fail/6 certificateHold", 6, authority.ErrBadRevocationReason},
		{"fail/7 is unassigned", 7, authority.ErrBadRevocationReason},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cert := e.issue(ctx, owner, []string{"op-a.example.com", "op-b.example.com", "op-c.example.com", "op-d.example.com"}[i])
			_, err := op.RevokeOrder(ctx, cert.order, &tc.reason, admin)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v; want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, operator.ErrInvalid) {
					t.Errorf("err %v is not operator.ErrInvalid (the admin API's 400)", err)
				}
				return
			}
			crl := e.crl(lists(cert.leaf.SerialNumber))
			if got, _ := entry(crl, cert.leaf.SerialNumber); got.ReasonCode != tc.reason {
				t.Errorf("CRL reason %d; want %d", got.ReasonCode, tc.reason)
			}
		})
	}
}

// A ledger row holding removeFromCRL, as an older version let clients
// record, must still list its certificate as revoked: on a complete CRL,
// reason 8 would tell verifiers it is good again.
func TestALedgerEntryWithRemoveFromCRLIsListedRevokedWithoutThatReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	owner := e.client(ctx)
	cert := e.issue(ctx, owner, "legacy.example.com")
	stored, err := e.db.CertificateOfOrder(ctx, cert.order)
	if err != nil {
		t.Fatal(err)
	}
	eight := 8
	if _, err := e.db.RevokeCertificate(ctx, store.Revocation{
		CertificateID: stored.ID, Profile: stored.Profile, OrderID: stored.OrderID, Serial: stored.Serial,
		IssuerKeyID: signer.LeafIssuerKeyID(cert.leaf), Reason: &eight, RevokedAt: time.Now(), NotAfter: stored.NotAfter,
		ActorKind: authority.ActorAccount, ActorID: "legacy",
	}, store.AuditEvent{At: time.Now(), Event: vocab.EventCertificateRevoked, Outcome: authority.OutcomeSuccess}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Authority().RegenerateCRL(ctx); err != nil {
		t.Fatal(err)
	}
	crl := e.crl(lists(cert.leaf.SerialNumber))
	got := mustEntry(t, crl, cert.leaf.SerialNumber)
	if got.ReasonCode == 8 {
		t.Fatal("the CRL lists the certificate with removeFromCRL, which un-revokes it")
	}
	for _, ext := range got.Extensions {
		if ext.Id.Equal([]int{2, 5, 29, 21}) {
			t.Errorf("the entry carries a reasonCode extension %x; want none", ext.Value)
		}
	}
}

func mustEntry(t *testing.T, crl *x509.RevocationList, serial interface{ String() string }) x509.RevocationListEntry {
	t.Helper()
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.String() == serial.String() {
			return e
		}
	}
	t.Fatalf("serial %s is not on the CRL", serial)
	return x509.RevocationListEntry{}
}
