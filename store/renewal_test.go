package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// renewalFixture is a store with accounts and the certificates a test
// issues to them.
type renewalFixture struct {
	t  *testing.T
	db *DB
}

func (f renewalFixture) account() string {
	f.t.Helper()
	a, _, err := f.db.CreateAccount(context.Background(), Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	return a.ID
}

// order stores a pending order of account for name, replacing the
// certificate replaces ("" for none), expiring an hour after t0.
func (f renewalFixture) order(account, name, replaces string) (Order, error) {
	id := acme.Identifier{Type: "dns", Value: name}
	o := Order{Profile: "p", AccountID: account, Identifiers: []acme.Identifier{id}, Expires: t0.Add(time.Hour)}
	if replaces != "" {
		o.Replaces, o.ReplacesCertificateID = "certid-"+replaces, replaces
	}
	return f.db.CreateOrder(context.Background(), o,
		[]Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, t0)
}

// issue drives order to valid with a certificate of serial from issuer,
// valid until notAfter.
func (f renewalFixture) issue(o Order, serial, issuer string, notAfter time.Time) Certificate {
	f.t.Helper()
	ctx := context.Background()
	c := challengeOf(f.t, f.db, o.AuthzIDs[0])
	if _, err := f.db.CompleteChallenge(ctx, c.ID, true, nil, t0); err != nil {
		f.t.Fatal(err)
	}
	if ok, err := f.db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, OrderClient{}, "", t0); err != nil || !ok {
		f.t.Fatalf("claiming order %s: %v %v", o.ID, ok, err)
	}
	cert, err := f.db.IssueOrder(ctx, Certificate{OrderID: o.ID, Profile: "p", AccountID: o.AccountID, Serial: serial,
		ChainPEM: "-", PublicKey: []byte{1}, NotBefore: t0, NotAfter: notAfter, IssuerKeyID: issuer},
		AuditEvent{At: t0, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID, Serial: serial}, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	return cert
}

func (f renewalFixture) cert(account, name, serial, issuer string, notAfter time.Time) Certificate {
	f.t.Helper()
	o, err := f.order(account, name, "")
	if err != nil {
		f.t.Fatal(err)
	}
	return f.issue(o, serial, issuer, notAfter)
}

func TestRenewEarlyStampsExactlyTheSelectedLiveCertificatesAndAuditsEach(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		f := renewalFixture{t, openTest(t)}
		alice, bob, carol := f.account(), f.account(), f.account()
		day := t0.Add(24 * time.Hour)
		www := f.cert(alice, "www.example.com", "0a", "aaaa", day)
		api := f.cert(alice, "api.example.com", "0b", "bbbb", day)
		other := f.cert(bob, "www.example.org", "0c", "aaaa", day)
		f.cert(bob, "a_b.example.net", "0d", "bbbb", day)
		f.cert(carol, "axb.example.net", "10", "cccc", day)
		expired := f.cert(alice, "old.example.com", "0e", "aaaa", t0.Add(time.Minute))
		revoked := f.cert(alice, "gone.example.com", "0f", "aaaa", day)
		if _, err := f.db.RevokeCertificate(ctx, Revocation{CertificateID: revoked.ID, Profile: "p", OrderID: revoked.OrderID,
			Serial: revoked.Serial, RevokedAt: t0, NotAfter: day, ActorKind: "admin"}, AuditEvent{At: t0, Event: "certificate_revoked", Outcome: "success"}); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			sel  RenewEarlySelection
			want []string // serials
		}{
			{"ok/by serial", RenewEarlySelection{Serials: []string{"0a", "0c"}}, []string{"0a", "0c"}},
			{"ok/by order", RenewEarlySelection{OrderIDs: []string{api.OrderID}}, []string{"0b"}},
			{"ok/by account", RenewEarlySelection{AccountID: bob}, []string{"0c", "0d"}},
			{"ok/by issuing CA", RenewEarlySelection{IssuerKeyID: "AAAA"}, []string{"0a", "0c"}},
			{"ok/by identifier pattern", RenewEarlySelection{Identifier: "*.example.com"}, []string{"0a", "0b"}},
			{"ok/by exact identifier", RenewEarlySelection{Identifier: "www.example.org"}, []string{"0c"}},
			{"ok/an underscore in a pattern is no LIKE wildcard", RenewEarlySelection{Identifier: "a_b.*"}, []string{"0d"}},
			{"ok/criteria combine", RenewEarlySelection{AccountID: alice, IssuerKeyID: "aaaa"}, []string{"0a"}},
			{"ok/another profile's selection", RenewEarlySelection{Profile: "q", AccountID: alice}, nil},
			{"ok/expired and revoked are never chosen", RenewEarlySelection{Serials: []string{expired.Serial, revoked.Serial}}, nil},
		}
		for i, c := range cases {
			at := t0.Add(time.Duration(i+1) * time.Hour)
			url := "https://status.example.com/" + c.name
			got, err := f.db.RenewEarly(ctx, c.sel, url, AuditEvent{At: at, Event: acme.EventRenewEarly, Outcome: "success", ActorKind: "cli"}, at, 0, 10)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got.Count != len(got.First) {
				t.Errorf("%s: counted %d, listed %d", c.name, got.Count, len(got.First))
			}
			var serials []string
			for _, g := range got.First {
				serials = append(serials, g.Serial)
			}
			slices.Sort(serials)
			if !slices.Equal(serials, c.want) {
				t.Errorf("%s: chose %v, want %v", c.name, serials, c.want)
			}
			for _, s := range c.want {
				cs, err := f.db.CertificatesBySerial(ctx, "p", s)
				if err != nil || len(cs) != 1 {
					t.Fatalf("the certificates with serial %s: %d, %v; want 1", s, len(cs), err)
				}
				cert := cs[0]
				if !cert.RenewEarlyAt.Equal(at) || cert.ExplanationURL != url {
					t.Errorf("%s: %s stamped %v %q, want %v %q", c.name, s, cert.RenewEarlyAt, cert.ExplanationURL, at, url)
				}
				evs, err := f.db.SearchAudit(ctx, AuditFilter{Event: acme.EventRenewEarly, Serial: s, Since: at, Until: at.Add(time.Millisecond)})
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != 1 || evs[0].OrderID != cert.OrderID || evs[0].AccountID != cert.AccountID || evs[0].ActorKind != "cli" {
					t.Errorf("%s: audit rows of %s: %+v; want one naming its order and account", c.name, s, evs)
				}
			}
		}
		for _, c := range []Certificate{www, other, expired, revoked} {
			got, err := f.db.GetCertificate(ctx, "p", c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.IssuerKeyID != c.IssuerKeyID {
				t.Errorf("certificate %s read back with issuer %q, stored %q", c.Serial, got.IssuerKeyID, c.IssuerKeyID)
			}
		}
		for _, c := range []Certificate{expired, revoked} {
			got, _ := f.db.GetCertificate(ctx, "p", c.ID)
			if !got.RenewEarlyAt.IsZero() {
				t.Errorf("certificate %s, expired or revoked, was stamped", c.Serial)
			}
		}
	})
}

// A renew-early of a whole issuer (a CA rotation) may select a fleet: it
// is stamped a batch at a time, each batch with its audit rows in one
// transaction, so that it never holds the database's writes for its whole
// length. One that fails part way keeps the batches it committed, each
// stamp with its audit row, says how many, and stamps nothing of the
// batch that failed; asking again completes it.
func TestARenewEarlyThatFailsPartWayKeepsItsCommittedBatchesEachAudited(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		f := renewalFixture{t, openTest(t)}
		acct := f.account()
		day := t0.Add(24 * time.Hour)
		var certs []Certificate
		for i := range 5 {
			certs = append(certs, f.cert(acct, fmt.Sprintf("host%d.example.com", i), fmt.Sprintf("0%d", i+1), "aaaa", day))
		}
		slices.SortFunc(certs, func(a, b Certificate) int { return strings.Compare(a.ID, b.ID) })
		// The fourth certificate's audit row cannot be written: the
		// second batch of two fails.
		refuse := map[string][]string{
			"sqlite": {`CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_events WHEN NEW.serial = '` + certs[3].Serial +
				`' BEGIN SELECT RAISE(ABORT, 'audit refused'); END`},
			"postgres": {`CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				IF NEW.serial = '` + certs[3].Serial + `' THEN RAISE EXCEPTION 'audit refused'; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_audit()`},
		}[dialectOf(t).name]
		for _, stmt := range refuse {
			if _, err := f.db.wr.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		ev := AuditEvent{At: t0, Event: acme.EventRenewEarly, Outcome: "success", ActorKind: "cli"}
		got, err := f.db.RenewEarly(ctx, RenewEarlySelection{IssuerKeyID: "aaaa"}, "", ev, t0, 2, 10)
		if err == nil || got.Count != 2 || !strings.Contains(err.Error(), "after 2 certificates") {
			t.Fatalf("a renew-early whose second batch fails: %d stamped, %v; want 2 and an error saying so", got.Count, err)
		}
		for i, c := range certs {
			cur, err := f.db.GetCertificate(ctx, "p", c.ID)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := f.db.SearchAudit(ctx, AuditFilter{Event: acme.EventRenewEarly, Serial: c.Serial})
			if err != nil {
				t.Fatal(err)
			}
			stamped, audited := !cur.RenewEarlyAt.IsZero(), len(rows)
			if want := i < 2; stamped != want || audited != map[bool]int{true: 1, false: 0}[want] {
				t.Errorf("certificate %d of 5 in id order: stamped %v with %d audit rows; want stamped %v with one row each", i+1, stamped, audited, want)
			}
		}
	})
}

func TestRenewEarlyRefusesASelectionThatNamesNothingButAProfile(t *testing.T) {
	db := openTest(t)
	f := renewalFixture{t, db}
	f.cert(f.account(), "www.example.com", "0a", "aaaa", t0.Add(time.Hour))
	if got, err := db.RenewEarly(context.Background(), RenewEarlySelection{Profile: "p"}, "", AuditEvent{}, t0, 0, 10); err == nil {
		t.Fatalf("an empty selection stamped %d certificates", got.Count)
	}
}

func TestASecondOrderReplacingACertificateIsRefusedWhileTheFirstIsLive(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		f := renewalFixture{t, openTest(t)}
		acct := f.account()
		cases := []struct {
			name  string
			first func(o Order) // what becomes of the first replacing order
			ok    bool          // a second one is then accepted
			at    time.Time
		}{
			{"fail/the first is pending", func(Order) {}, false, t0},
			{"fail/the first is valid", func(o Order) { f.issue(o, NewID()[18:], "aa", t0.Add(time.Hour)) }, false, t0},
			{"ok/the first is invalid", func(o Order) {
				if err := f.db.FailOrder(ctx, o.ID, nil, "", t0); err != nil {
					t.Fatal(err)
				}
			}, true, t0},
			{"ok/the first is pending past its expiry", func(Order) {}, true, t0.Add(time.Hour)},
		}
		for i, c := range cases {
			old := f.cert(acct, "www.example.com", string(rune('a'+i))+"0", "aa", t0.Add(time.Hour))
			first, err := f.order(acct, "www.example.com", old.ID)
			if err != nil {
				t.Fatalf("%s: the first replacement: %v", c.name, err)
			}
			c.first(first)
			id := acme.Identifier{Type: "dns", Value: "www.example.com"}
			second, err := f.db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct, Identifiers: []acme.Identifier{id},
				Expires: c.at.Add(time.Hour), Replaces: "x", ReplacesCertificateID: old.ID},
				[]Authz{{Identifier: id, Expires: c.at.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, c.at)
			if c.ok != (err == nil) {
				t.Errorf("%s: the second replacement: %v", c.name, err)
			}
			if !c.ok && !errors.Is(err, ErrConflict) {
				t.Errorf("%s: refused with %v; want ErrConflict", c.name, err)
			}
			if c.ok && err == nil {
				got, err := f.db.GetOrder(ctx, "p", second.ID)
				if err != nil || got.Replaces != "x" || got.ReplacesCertificateID != old.ID {
					t.Errorf("%s: the order reads back replacing %q (%q), %v", c.name, got.Replaces, got.ReplacesCertificateID, err)
				}
			}
		}
	})
}

func TestCertificatesWithoutAnIssuerAreListedUntilOneIsNamedAndNamedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		f := renewalFixture{t, openTest(t)}
		acct := f.account()
		day := t0.Add(24 * time.Hour)
		a := f.cert(acct, "a.example.com", "0a", "", day)
		b := f.cert(acct, "b.example.com", "0b", "", day)
		f.cert(acct, "named.example.com", "0c", "cccc", day)
		f.cert(acct, "expired.example.com", "0d", "", t0.Add(time.Minute))
		list := func(after string) []string {
			us, err := f.db.CertificatesWithoutIssuer(ctx, after, t0.Add(time.Hour), 10)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, u := range us {
				if u.ChainPEM == "" {
					t.Errorf("certificate %s listed without its chain", u.ID)
				}
				ids = append(ids, u.ID)
			}
			return ids
		}
		want := []string{a.ID, b.ID}
		slices.Sort(want)
		if got := list(""); !slices.Equal(got, want) {
			t.Fatalf("listed %v, want the unexpired ones without an issuer %v", got, want)
		}
		if got := list(want[0]); !slices.Equal(got, want[1:]) {
			t.Fatalf("listed after %s: %v, want %v", want[0], got, want[1:])
		}
		if err := f.db.SetCertificateIssuer(ctx, a.ID, "aaaa"); err != nil {
			t.Fatal(err)
		}
		if err := f.db.SetCertificateIssuer(ctx, a.ID, "ffff"); err != nil {
			t.Fatal(err)
		}
		if got := list(""); !slices.Equal(got, []string{b.ID}) {
			t.Errorf("after naming %s: listed %v, want only %s", a.ID, got, b.ID)
		}
		if c, err := f.db.GetCertificate(ctx, "p", a.ID); err != nil || c.IssuerKeyID != "aaaa" {
			t.Errorf("the named certificate reads back with issuer %q (%v), want the first name aaaa", c.IssuerKeyID, err)
		}
	})
}
