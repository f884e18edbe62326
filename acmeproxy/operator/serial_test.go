package operator

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestASerialIsTakenInEveryFormToolsPrintItAndStoredAsIssuanceStoresIt(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"openssl's even-length upper case", "0A1B2C", "0a1b2c"},
		{"Go's Text(16), without the leading zero", "a1b2c", "0a1b2c"},
		{"octets separated by colons", "0a:1b:2c", "0a1b2c"},
		{"more leading zeros than an octet needs", "00000a1b2c", "0a1b2c"},
		{"spaces around it", " 0a1b2c\t", "0a1b2c"},
		{"a first octet of 0x10 or more, as given", "FF01", "ff01"},
		{"twenty octets", strings.Repeat("ff", 20), strings.Repeat("ff", 20)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, err := normalSerial(c.in); err != nil || got != c.want {
				t.Errorf("normalSerial(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
}

func TestASerialThatIsNoCertificatesIsRefusedAsInvalid(t *testing.T) {
	for _, c := range []struct{ name, in string }{
		{"empty", ""},
		{"colons only", "::"},
		{"not hexadecimal", "xyz"},
		{"a 0x prefix", "0x0a1b"},
		{"zero", "00"},
		{"21 octets", "01" + strings.Repeat("00", 20)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, err := normalSerial(c.in); !errors.Is(err, ErrInvalid) {
				t.Errorf("normalSerial(%q) = %q, %v; want ErrInvalid", c.in, got, err)
			}
		})
	}
}

// A serial whose first octet is below 0x10 is printed without its leading
// zero by Go's Text(16) and many tools: each search by serial finds the
// certificate in that form as in the stored one.
func TestEverySearchBySerialFindsACertificateWhoseSerialStartsWithAZeroDigit(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	now := time.Now().Truncate(time.Millisecond)
	serial, _ := new(big.Int).SetString("0a1b2c3d4e5f60718293", 16)
	stored := legacyCertWithSerial(t, db, now, "zero.example.com", []byte{0xaa, 0xbb}, serial)
	legacyCert(t, db, now, "other.example.com", []byte{0xaa, 0xbb})
	if stored != "0a1b2c3d4e5f60718293" {
		t.Fatalf("stored serial %q", stored)
	}
	op := &Operator{DB: db, Clock: clocktest.New(now)}
	for _, form := range []string{serial.Text(16), strings.ToUpper(serial.Text(16)), "0A:1B:2C:3D:4E:5F:60:71:82:93", stored} {
		t.Run(form, func(t *testing.T) {
			orders, err := op.ListOrders(ctx, store.OrderFilter{Serial: form})
			if err != nil || len(orders.Items) != 1 || orders.Items[0].Certificate == nil || orders.Items[0].Certificate.Serial != stored {
				t.Errorf("the order search by serial %s: %+v, %v; want the certificate's order alone", form, orders.Items, err)
			}
			audit, err := op.SearchAudit(ctx, store.AuditFilter{Event: acme.EventCertificateIssued, Serial: form})
			if err != nil || len(audit.Items) != 1 || audit.Items[0].Serial != stored {
				t.Errorf("the audit search by serial %s: %+v, %v; want the issuance's row alone", form, audit.Items, err)
			}
			v, err := op.RenewEarly(ctx, RenewEarlyRequest{Serials: []string{form}}, authority.Actor{Kind: authority.ActorCLI})
			if err != nil || len(v.Certificates) != 1 || v.Certificates[0].Serial != stored {
				t.Errorf("renew-early by serial %s: %+v, %v; want the certificate alone", form, v.Certificates, err)
			}
		})
	}
}

// A serial is unique per issuing CA only: when two CAs issued it (one
// before the store recorded issuers, one since), the order search by
// serial lists both, each certificate naming its issuer, newest first;
// an unknown serial lists none.
func TestTheOrderSearchBySerialListsEveryCertificateWithItEachNamingItsIssuer(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	now := time.Now().Truncate(time.Millisecond)
	serial := big.NewInt(1)
	first := legacyCertWithSerial(t, db, now, "first.example.com", []byte{0xaa}, serial)
	o := issuedOrder(t, db, now.Add(time.Second), "second.example.com")
	if _, err := db.IssueOrder(ctx, store.Certificate{OrderID: o.ID, Profile: "p", AccountID: o.AccountID, Serial: first,
		ChainPEM: "-", PublicKey: []byte{2}, NotBefore: now, NotAfter: now.Add(time.Hour), IssuerKeyID: "bbcc"},
		store.AuditEvent{At: now, Event: acme.EventCertificateIssued, Outcome: "success"}, now.Add(time.Second)); err != nil {
		t.Fatalf("a second CA's certificate with serial %s: %v", first, err)
	}
	op := &Operator{DB: db, Clock: clocktest.New(now)}
	page, err := op.ListOrders(ctx, store.OrderFilter{Serial: "01"})
	got := page.Items
	if err != nil || len(got) != 2 {
		t.Fatalf("the orders of serial 01: %+v, %v; want two", got, err)
	}
	for i, want := range []struct{ identifier, issuer string }{{"second.example.com", "bbcc"}, {"first.example.com", ""}} {
		if c := got[i].Certificate; got[i].Identifiers[0].Value != want.identifier || c == nil || c.Serial != first || c.IssuerKeyID != want.issuer {
			t.Errorf("order %d of serial 01: %s with %+v; want %s's, issued by %q", i, got[i].Identifiers[0].Value, c, want.identifier, want.issuer)
		}
	}
	if page, err := op.ListOrders(ctx, store.OrderFilter{Serial: "02"}); err != nil || len(page.Items) != 0 {
		t.Errorf("the orders of an unknown serial: %+v, %v; want none", page.Items, err)
	}
}

// issuedOrder creates an order for name of profile p claimed for issue.
func issuedOrder(t *testing.T, db *store.DB, now time.Time, name string) store.Order {
	t.Helper()
	ctx := context.Background()
	acct, _, err := db.CreateAccount(ctx, store.Account{Profile: "p", Thumbprint: store.NewID(), KeyJWK: []byte(`{}`)}, now)
	if err != nil {
		t.Fatal(err)
	}
	id := acme.Identifier{Type: "dns", Value: name}
	o, err := db.CreateOrder(ctx, store.Order{Profile: "p", AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Expires: now.Add(time.Hour)},
		[]store.Authz{{Identifier: id, Expires: now.Add(time.Hour), Challenges: []store.Challenge{{Type: "http-01", Token: store.NewID()}}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	a, err := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, now); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, store.OrderClient{}, "", now); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	return o
}
