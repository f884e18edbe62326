package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// issuedCert stores an order of one identifier with a certificate valid
// until notAfter, and returns the certificate.
func issuedCert(t *testing.T, db *DB, serial string, notAfter time.Time) Certificate {
	t.Helper()
	return issuedCertFor(t, db, serial, []byte{1}, notAfter)
}

// issuedCertFor is issuedCert for a certificate of the key spki.
func issuedCertFor(t *testing.T, db *DB, serial string, spki []byte, notAfter time.Time) Certificate {
	t.Helper()
	ctx := context.Background()
	o := newOrderWithAuthzs(t, db, 1)
	c := challengeOf(t, db, o.AuthzIDs[0])
	if ok, err := db.StartChallenge(ctx, c.ID, t0); err != nil || !ok {
		t.Fatalf("start: %v %v", ok, err)
	}
	if _, err := db.CompleteChallenge(ctx, c.ID, true, nil, t0); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, OrderClient{}, "", t0); err != nil || !ok {
		t.Fatalf("claiming order %s: %v %v", o.ID, ok, err)
	}
	cert, err := db.IssueOrder(ctx, Certificate{OrderID: o.ID, Profile: "p", AccountID: o.AccountID, Serial: serial,
		ChainPEM: "-", PublicKey: spki, NotBefore: t0, NotAfter: notAfter},
		AuditEvent{At: t0, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID, Serial: serial}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func revoke(t *testing.T, db *DB, c Certificate, issuer string, reason int) (Revocation, error) {
	t.Helper()
	return db.RevokeCertificate(context.Background(), Revocation{CertificateID: c.ID, Profile: "p", OrderID: c.OrderID,
		Serial: c.Serial, IssuerKeyID: issuer, Reason: &reason, RevokedAt: t0.Add(time.Minute), NotAfter: c.NotAfter,
		ActorKind: "admin"}, AuditEvent{At: t0, Event: "certificate_revoked", Outcome: "success", OrderID: c.OrderID})
}

func TestARevocationIsRecordedOnceWithItsLedgerRowAndAuditRow(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		c := issuedCert(t, db, "0a", t0.Add(time.Hour))
		if _, err := revoke(t, db, c, "ca", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := revoke(t, db, c, "ca", 4); !errors.Is(err, ErrWrongState) {
			t.Fatalf("second revocation: %v; want ErrWrongState", err)
		}
		got, err := db.CertificateOfOrder(ctx, c.OrderID)
		if err != nil || got.Reason == nil || *got.Reason != 1 || got.RevokedAt.IsZero() {
			t.Fatalf("stamp %+v %v; want revoked with the first reason", got, err)
		}
		led, err := db.RevocationOf(ctx, c.ID)
		if err != nil || led.IssuerKeyID != "ca" || *led.Reason != 1 || led.Serial != "0a" {
			t.Fatalf("ledger %+v %v", led, err)
		}
		if evs, _ := db.SearchAudit(ctx, AuditFilter{Event: "certificate_revoked"}); len(evs) != 1 {
			t.Errorf("%d certificate_revoked rows; want 1", len(evs))
		}
		if cs, err := db.CertificatesBySerial(ctx, "p", "0a"); err != nil || len(cs) != 1 {
			t.Errorf("by serial: %d, %v; want 1", len(cs), err)
		}
		if _, err := db.CertificatesBySerial(ctx, "other", "0a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("by serial in another profile: %v; want ErrNotFound", err)
		}
	})
}

func TestAKeyIsKnownCompromisedOnceACertificateOfItIsRevokedForKeyCompromise(t *testing.T) {
	tests := []struct {
		name   string
		reason int  // the revocation's reason; -1: not revoked
		change bool // then an operator changes the reason to keyCompromise
		want   bool
	}{
		{name: "a certificate not revoked leaves its key usable", reason: -1},
		{name: "a certificate revoked as superseded leaves its key usable", reason: acme.ReasonSuperseded},
		{name: "a certificate revoked for keyCompromise makes its key compromised", reason: acme.ReasonKeyCompromise, want: true},
		{name: "a revocation changed to keyCompromise makes its key compromised", reason: acme.ReasonSuperseded, change: true, want: true},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				key, other := []byte("spki of the key"), []byte("spki of another key")
				issuedCertFor(t, db, "0b", other, t0.Add(time.Hour))
				c := issuedCertFor(t, db, "0a", key, t0.Add(time.Hour))
				if tc.reason >= 0 {
					if _, err := revoke(t, db, c, "ca", tc.reason); err != nil {
						t.Fatal(err)
					}
				}
				if tc.change {
					if err := db.ChangeRevocationReason(ctx, c.ID, acme.ReasonKeyCompromise, AuditEvent{At: t0, Event: "revocation_reason_changed", Outcome: "success"}); err != nil {
						t.Fatal(err)
					}
				}
				got, err := db.KeyRevokedForCompromise(ctx, []byte("a third key"), key)
				if err != nil || got != tc.want {
					t.Errorf("KeyRevokedForCompromise(the certificate's key) = %v, %v; want %v", got, err, tc.want)
				}
				if got, err := db.KeyRevokedForCompromise(ctx, other); err != nil || got {
					t.Errorf("KeyRevokedForCompromise(another certificate's key) = %v, %v; want false", got, err)
				}
			})
		}
	})
}

func TestCRLNumbersOnlyGrowAndExpiredEntriesAreDropped(t *testing.T) {
	eachDialect(t, testCRLNumbersOnlyGrowAndExpiredEntriesAreDropped)
}

func testCRLNumbersOnlyGrowAndExpiredEntriesAreDropped(t *testing.T) {
	ctx := context.Background()
	place := newPlace(t)
	db, err := dialectOf(t).openAt(ctx, place)
	if err != nil {
		t.Fatal(err)
	}
	short := issuedCert(t, db, "01", t0.Add(time.Hour))
	long := issuedCert(t, db, "02", t0.Add(48*time.Hour))
	other := issuedCert(t, db, "03", t0.Add(48*time.Hour))
	for _, c := range []Certificate{short, long} {
		if _, err := revoke(t, db, c, "ca", 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := revoke(t, db, other, "other-ca", 1); err != nil {
		t.Fatal(err)
	}
	if stale, _ := db.StaleCRLIssuers(ctx); len(stale) != 2 {
		t.Errorf("stale issuers %v; want both", stale)
	}
	var listed []string
	build := func(number int64, entries []CRLEntry) ([]byte, time.Time, time.Time, error) {
		listed = listed[:0]
		for _, e := range entries {
			listed = append(listed, e.Serial)
		}
		return []byte{byte(number)}, t0, t0.Add(24 * time.Hour), nil
	}
	first, err := db.PublishCRL(ctx, "ca", "CN=ca", t0.Add(2*time.Minute), build)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(listed, ",") != "01,02" || first.Number != 1 || first.Entries != 2 {
		t.Errorf("first CRL #%d lists %v", first.Number, listed)
	}
	if stale, _ := db.StaleCRLIssuers(ctx); len(stale) != 1 || stale[0] != "other-ca" {
		t.Errorf("stale issuers %v; want other-ca only", stale)
	}
	// Past the short certificate's expiry it is dropped.
	second, err := db.PublishCRL(ctx, "ca", "CN=ca", t0.Add(2*time.Hour), build)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(listed, ",") != "02" || second.Number != 2 {
		t.Errorf("second CRL #%d lists %v; want 02 only", second.Number, listed)
	}
	// A failed build changes nothing, the counter included.
	if _, err := db.PublishCRL(ctx, "ca", "CN=ca", t0.Add(3*time.Hour), func(int64, []CRLEntry) ([]byte, time.Time, time.Time, error) {
		return nil, t0, t0, errors.New("no key")
	}); err == nil || err.Error() != "no key" {
		t.Errorf("failed build: %v; want its own error", err)
	}
	db.Close()

	db = openAt(t, place)
	if got, err := db.GetCRL(ctx, "ca"); err != nil || got.Number != 2 || string(got.DER) != "\x02" {
		t.Fatalf("after reopening: %+v %v", got, err)
	}
	third, err := db.PublishCRL(ctx, "ca", "CN=ca", t0.Add(4*time.Hour), build)
	if err != nil || third.Number != 3 {
		t.Errorf("after reopening the number is %d (%v); want 3", third.Number, err)
	}
	if _, err := db.GetCRL(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("CRL of an unknown issuer: %v", err)
	}
}

func TestTheAuditTrailIsInsertOnlyAndSearchable(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		for i, ev := range []AuditEvent{
			{At: t0, Event: "certificate_issued", Outcome: "success", Profile: "a", OrderID: "o1", Serial: "01"},
			{At: t0.Add(time.Minute), Event: "revocation_refused", Outcome: "refused", Profile: "a", OrderID: "o1", AccountID: "x"},
			{At: t0.Add(2 * time.Minute), Event: "certificate_issued", Outcome: "success", Profile: "b", OrderID: "o2",
				Identifiers: []acme.Identifier{{Type: "dns", Value: "b.example.com"}}},
		} {
			if err := db.InsertAudit(ctx, ev); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		}
		if err := db.InsertAudit(ctx, AuditEvent{At: t0}); err == nil {
			t.Error("an event without a name was written")
		}
		for name, tc := range map[string]struct {
			f    AuditFilter
			want int
		}{
			"all":            {AuditFilter{}, 3},
			"profile":        {AuditFilter{Profile: "a"}, 2},
			"event":          {AuditFilter{Event: "certificate_issued"}, 2},
			"outcome":        {AuditFilter{Outcome: "refused"}, 1},
			"order":          {AuditFilter{OrderID: "o1"}, 2},
			"account":        {AuditFilter{AccountID: "x"}, 1},
			"serial":         {AuditFilter{Serial: "01"}, 1},
			"since":          {AuditFilter{Since: t0.Add(time.Minute)}, 2},
			"until":          {AuditFilter{Until: t0.Add(time.Minute)}, 1},
			"page":           {AuditFilter{Limit: 2}, 2},
			"before":         {AuditFilter{BeforeID: 3}, 2},
			"combined":       {AuditFilter{Profile: "a", Event: "certificate_issued", OrderID: "o1"}, 1},
			"no such serial": {AuditFilter{Serial: "ff"}, 0},
		} {
			got, err := db.SearchAudit(ctx, tc.f)
			if err != nil || len(got) != tc.want {
				t.Errorf("%s: %d rows (%v); want %d", name, len(got), err, tc.want)
			}
		}
		got, _ := db.SearchAudit(ctx, AuditFilter{Profile: "b"})
		if len(got) != 1 || len(got[0].Identifiers) != 1 || got[0].Identifiers[0].Value != "b.example.com" {
			t.Errorf("identifiers did not round-trip: %+v", got)
		}
		for _, stmt := range []string{`UPDATE audit_events SET detail = 'x'`, `DELETE FROM audit_events`} {
			if _, err := rawW(db).ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "insert-only") {
				t.Errorf("%s: %v; want refused as insert-only", stmt, err)
			}
		}
	})
}

// RFC 8555 §7.6: an account may revoke a certificate for names it holds
// valid, unexpired authorizations for — every one of the names, in the
// profile asked about, by that account.
func TestAnAccountHoldsAuthorizationsOnlyWhenEveryNameIsValidlyAuthorizedToIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		type grant struct {
			account string // "alice" or "bob", both of profile p
			name    string // "*.example.com": a wildcard authorization of example.com
			state   string // pending, valid or deactivated
			expires time.Duration
		}
		const hour = time.Hour
		for _, tc := range []struct {
			name    string
			grants  []grant
			profile string // asked about, for alice
			names   []string
			at      time.Duration // after t0
			want    bool
		}{
			{"valid and unexpired for every name",
				[]grant{{"alice", "a.example.com", "valid", hour}, {"alice", "b.example.com", "valid", hour}},
				"p", []string{"a.example.com", "b.example.com"}, time.Minute, true},
			{"only a pending authorization",
				[]grant{{"alice", "a.example.com", "pending", hour}},
				"p", []string{"a.example.com"}, time.Minute, false},
			{"a deactivated authorization",
				[]grant{{"alice", "a.example.com", "deactivated", hour}},
				"p", []string{"a.example.com"}, time.Minute, false},
			{"valid for the first of two names",
				[]grant{{"alice", "a.example.com", "valid", hour}},
				"p", []string{"a.example.com", "b.example.com"}, time.Minute, false},
			{"valid for the second of two names",
				[]grant{{"alice", "b.example.com", "valid", hour}},
				"p", []string{"a.example.com", "b.example.com"}, time.Minute, false},
			{"valid but expired",
				[]grant{{"alice", "a.example.com", "valid", hour}},
				"p", []string{"a.example.com"}, 2 * hour, false},
			{"valid for another account",
				[]grant{{"bob", "a.example.com", "valid", hour}},
				"p", []string{"a.example.com"}, time.Minute, false},
			{"valid, but asked about in another profile",
				[]grant{{"alice", "a.example.com", "valid", hour}},
				"q", []string{"a.example.com"}, time.Minute, false},
			{"a wildcard name by a wildcard authorization",
				[]grant{{"alice", "*.example.com", "valid", hour}},
				"p", []string{"*.example.com"}, time.Minute, true},
			{"a wildcard name by an authorization of the base name",
				[]grant{{"alice", "example.com", "valid", hour}},
				"p", []string{"*.example.com"}, time.Minute, false},
			{"no names at all",
				[]grant{{"alice", "a.example.com", "valid", hour}},
				"p", nil, time.Minute, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				accounts := map[string]string{}
				for _, name := range []string{"alice", "bob"} {
					a, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: name, KeyJWK: []byte(`{}`)}, t0)
					if err != nil {
						t.Fatal(err)
					}
					accounts[name] = a.ID
				}
				for _, g := range tc.grants {
					holdAuthz(t, db, accounts[g.account], g.name, g.state, t0.Add(g.expires))
				}
				var idents []acme.Identifier
				for _, n := range tc.names {
					idents = append(idents, acme.Identifier{Type: "dns", Value: n})
				}
				got, err := db.HoldsAuthorizations(ctx, tc.profile, accounts["alice"], idents, t0.Add(tc.at))
				if err != nil || got != tc.want {
					t.Errorf("alice holds authorizations for %v in profile %s: %v (%v), want %v", tc.names, tc.profile, got, err, tc.want)
				}
			})
		}
	})
}

// holdAuthz stores an order of profile p by account for name, whose one
// authorization expires at expires and is left in state: pending, valid
// (its challenge validated at t0) or deactivated (after being valid).
func holdAuthz(t *testing.T, db *DB, account, name, state string, expires time.Time) {
	t.Helper()
	ctx := context.Background()
	base, wildcard := strings.CutPrefix(name, "*.")
	o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: account, Identifiers: []acme.Identifier{{Type: "dns", Value: name}}, Expires: expires},
		[]Authz{{Identifier: acme.Identifier{Type: "dns", Value: base}, Wildcard: wildcard, Expires: expires,
			Challenges: []Challenge{{Type: "dns-01", Token: NewID()}}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if state == "pending" {
		return
	}
	c := challengeOf(t, db, o.AuthzIDs[0])
	if ok, err := db.StartChallenge(ctx, c.ID, t0); err != nil || !ok {
		t.Fatalf("start: %v %v", ok, err)
	}
	if _, err := db.CompleteChallenge(ctx, c.ID, true, nil, t0); err != nil {
		t.Fatal(err)
	}
	if state == "deactivated" {
		if err := db.DeactivateAuthz(ctx, o.AuthzIDs[0], t0); err != nil {
			t.Fatal(err)
		}
	}
}
