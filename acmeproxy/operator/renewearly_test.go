package operator

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// openTestStore opens a store in a SQLite file of the test's own, closed
// when the test ends.
func openTestStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "t.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// legacyCert stores, as a version before issuer key ids did, a
// certificate for name signed by a CA whose subject key identifier is
// ski, and returns its serial.
func legacyCert(t *testing.T, db *store.DB, now time.Time, name string, ski []byte) string {
	t.Helper()
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	return legacyCertWithSerial(t, db, now, name, ski, serial.Add(serial, big.NewInt(1)))
}

// legacyCertWithSerial is legacyCert with the certificate's serial.
func legacyCertWithSerial(t *testing.T, db *store.DB, now time.Time, name string, ski []byte, serial *big.Int) string {
	t.Helper()
	ctx := context.Background()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "old CA"}, SubjectKeyId: ski,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: serial, DNSNames: []string{name},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)}, ca, leafKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
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
	hexSerial := hex.EncodeToString(serial.Bytes())
	if _, err := db.IssueOrder(ctx, store.Certificate{OrderID: o.ID, Profile: "p", AccountID: acct.ID, Serial: hexSerial,
		ChainPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), PublicKey: []byte{1},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)},
		store.AuditEvent{At: now, Event: acme.EventCertificateIssued, Outcome: "success", Serial: hexSerial}, now); err != nil {
		t.Fatal(err)
	}
	return hexSerial
}

// A CA rotation after an upgrade: certificates stored before their
// issuer was recorded are still found by their CA's key id.
func TestRenewEarlyByIssuerFindsCertificatesStoredBeforeIssuersWereRecorded(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	now := time.Now().Truncate(time.Millisecond)
	old := legacyCert(t, db, now, "old.example.com", []byte{0xaa, 0xbb})
	legacyCert(t, db, now, "other.example.com", []byte{0xcc, 0xdd})
	op := &Operator{DB: db, Clock: clocktest.New(now)}
	v, err := op.RenewEarly(ctx, RenewEarlyRequest{Issuer: "aabb"}, authority.Actor{Kind: authority.ActorCLI})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Certificates) != 1 || v.Certificates[0].Serial != old {
		t.Fatalf("renew-early by issuer aabb chose %+v; want only %s", v.Certificates, old)
	}
	cs, err := db.CertificatesBySerial(ctx, "p", old)
	if err != nil || len(cs) != 1 || cs[0].IssuerKeyID != "aabb" || !cs[0].RenewEarlyAt.Equal(now) {
		t.Fatalf("the certificates with serial %s read back as %+v (%v); want one, with issuer aabb, renew early at %v", old, cs, err, now)
	}
}

// openssl prints a key identifier as colon-separated upper-case octets
// (X509v3 Subject Key Identifier: AA:BB): the CA is found in that form
// as in the plain hex the CRL routes use.
func TestRenewEarlyByIssuerTakesTheKeyIDAsOpenSSLPrintsIt(t *testing.T) {
	for _, form := range []string{"AA:BB", "aa:bb", "AABB"} {
		t.Run(form, func(t *testing.T) {
			ctx := context.Background()
			db := openTestStore(t)
			now := time.Now().Truncate(time.Millisecond)
			want := legacyCert(t, db, now, "old.example.com", []byte{0xaa, 0xbb})
			op := &Operator{DB: db, Clock: clocktest.New(now)}
			v, err := op.RenewEarly(ctx, RenewEarlyRequest{Issuer: form}, authority.Actor{Kind: authority.ActorCLI})
			if err != nil || len(v.Certificates) != 1 || v.Certificates[0].Serial != want {
				t.Errorf("renew-early by issuer %s: %+v (%v); want %s", form, v.Certificates, err, want)
			}
		})
	}
}

// A renew-early of a whole fleet (a CA rotation) answers how many
// certificates it moved and lists a page of them, not every one: each has
// its renew_early audit row, which the audit search pages through.
func TestARenewEarlyAnswerCountsEveryCertificateItMovedAndListsAPageOfThem(t *testing.T) {
	tests := []struct {
		name       string
		certs      int
		wantListed int
	}{
		{"ok/a few are all listed", 3, 3},
		{"ok/a fleet past a page lists a page", RenewEarlyListed + 5, RenewEarlyListed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := openTestStore(t)
			now := time.Now().Truncate(time.Millisecond)
			if err := db.SeedAccounts(ctx, []store.Account{{ID: "fleet", Profile: "p", Thumbprint: "tp", KeyJWK: []byte(`{}`)}}, now); err != nil {
				t.Fatal(err)
			}
			seeded := make([]store.SeededOrder, tc.certs)
			for i := range seeded {
				seeded[i] = store.SeededOrder{Profile: "p", AccountID: "fleet", Challenges: []string{"http-01"}, Created: now,
					Identifiers: []acme.Identifier{{Type: "dns", Value: fmt.Sprintf("h%d.example.com", i)}},
					Certificate: store.Certificate{Serial: fmt.Sprintf("%04x", i+1), ChainPEM: "-", PublicKey: []byte{byte(i)},
						NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)}}
			}
			if _, err := db.SeedIssued(ctx, seeded); err != nil {
				t.Fatal(err)
			}
			op := &Operator{DB: db, Clock: clocktest.New(now)}
			v, err := op.RenewEarly(ctx, RenewEarlyRequest{Account: "fleet"}, authority.Actor{Kind: authority.ActorCLI})
			if err != nil {
				t.Fatal(err)
			}
			if v.Count != tc.certs || len(v.Certificates) != tc.wantListed {
				t.Errorf("renew-early of %d certificates: count %d, %d listed; want count %d, %d listed",
					tc.certs, v.Count, len(v.Certificates), tc.certs, tc.wantListed)
			}
			rows, err := db.SearchAudit(ctx, store.AuditFilter{Event: acme.EventRenewEarly, Limit: store.MaxPage})
			if err != nil {
				t.Fatal(err)
			}
			if want := min(tc.certs, store.MaxPage); len(rows) != want {
				t.Errorf("%d renew_early audit rows on the first page; want %d", len(rows), want)
			}
		})
	}
}
