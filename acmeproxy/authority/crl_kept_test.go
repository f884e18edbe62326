package authority

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// crlScene is an authority of profile "test" whose local CA signs CRLs,
// over a SQLite store holding issued certificates of that CA, each
// valid until its notAfter.
type crlScene struct {
	au     *Authority
	db     *store.DB
	clk    *clocktest.Fake
	ca     *x509.Certificate
	signer *localca.Signer
	// signer2, when set, is the signer the authority gets instead.
	signer2 signer.Signer
	path    string
	certs   []store.Order
	serial  []string
}

var crlSceneStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newCRLScene(t testing.TB, notAfter []time.Duration) *crlScene {
	t.Helper()
	ctx := context.Background()
	clk := clocktest.New(crlSceneStart)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1),
		Subject:   pkix.Name{CommonName: "CRL scene CA"},
		NotBefore: crlSceneStart.Add(-time.Hour), NotAfter: crlSceneStart.AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign},
		&x509.Certificate{Subject: pkix.Name{CommonName: "CRL scene CA"}}, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	s := &crlScene{clk: clk, ca: ca, path: filepath.Join(t.TempDir(), "acme.db")}
	if s.signer, err = localca.New(localca.Static([]*x509.Certificate{ca}, key), localca.Options{Clock: clk}); err != nil {
		t.Fatal(err)
	}
	s.open(t)
	if err := s.db.SeedAccounts(ctx, []store.Account{{ID: "acct", Profile: "test", Thumbprint: "t", KeyJWK: []byte(`{}`)}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	seeds := make([]store.SeededOrder, len(notAfter))
	for i, d := range notAfter {
		serial := make([]byte, 16)
		_, _ = rand.Read(serial)
		serial[0] = serial[0]&0x7f | 0x10 // positive, and no leading zero to drop
		name := fmt.Sprintf("crl-%d.example.com", i)
		seeds[i] = store.SeededOrder{Profile: "test", AccountID: "acct", Created: clk.Now(),
			Identifiers: []acme.Identifier{{Type: acme.IdentifierDNS, Value: name}}, Challenges: []string{acme.ChallengeHTTP01},
			Certificate: store.Certificate{Serial: fmt.Sprintf("%x", serial), ChainPEM: "-", PublicKey: []byte{1},
				NotBefore: clk.Now(), NotAfter: clk.Now().Add(d)}}
		s.serial = append(s.serial, seeds[i].Certificate.Serial)
	}
	if s.certs, err = s.db.SeedIssued(ctx, seeds); err != nil {
		t.Fatal(err)
	}
	return s
}

// open opens the scene's store and an authority over it, as a server
// starting does.
func (s *crlScene) open(t testing.TB) {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), s.path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s.db = db
	var sg signer.Signer = s.signer
	if s.signer2 != nil {
		sg = s.signer2
	}
	s.au, err = New(Config{Profile: "test"}, Options{DB: db, Queue: jobs.NewQueue(db, nil), Signer: sg, Validator: stubValidator{},
		Clock: s.clk, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
}

// revoke records the revocation of the scene's certificates idx with
// reason, as a revocation request does.
func (s *crlScene) revoke(t testing.TB, reason int, idx ...int) {
	t.Helper()
	revs := make([]store.Revocation, 0, len(idx))
	for _, i := range idx {
		c, err := s.db.CertificateOfOrder(context.Background(), s.certs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, store.Revocation{CertificateID: c.ID, Profile: "test", OrderID: c.OrderID, Serial: c.Serial,
			IssuerKeyID: signer.CAKeyID(s.ca), Reason: &reason, RevokedAt: s.clk.Now(), NotAfter: c.NotAfter, ActorKind: "admin"})
	}
	if err := s.db.SeedRevocations(context.Background(), revs); err != nil {
		t.Fatal(err)
	}
}

// regenerate publishes a new CRL and returns it parsed, with whether it
// was built from the entries kept of the last one.
func (s *crlScene) regenerate(t testing.TB) (*x509.RevocationList, bool) {
	t.Helper()
	crl, err := s.au.RegenerateCRL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseRevocationList(crl.DER)
	if err != nil {
		t.Fatalf("the CRL does not parse: %v", err)
	}
	if err := parsed.CheckSignatureFrom(s.ca); err != nil {
		t.Errorf("the CRL's signature: %v", err)
	}
	if parsed.Number.Int64() != crl.Number || len(parsed.RevokedCertificateEntries) != crl.Entries {
		t.Errorf("the CRL is #%d with %d entries; the store says #%d with %d",
			parsed.Number, len(parsed.RevokedCertificateEntries), crl.Number, crl.Entries)
	}
	k := s.au.crls.lastBuilt(signer.CAKeyID(s.ca))
	if k == nil || k.number != crl.Number {
		t.Fatalf("the authority keeps no entries of CRL #%d", crl.Number)
	}
	return parsed, k.delta
}

// listed is what crl lists: serial (hex) → reason code.
func listed(crl *x509.RevocationList) map[string]int {
	out := map[string]int{}
	for _, e := range crl.RevokedCertificateEntries {
		out[fmt.Sprintf("%x", e.SerialNumber)] = e.ReasonCode
	}
	return out
}

// want is what a CRL listing the scene's certificates idx with reason
// lists.
func (s *crlScene) want(reason int, idx ...int) map[string]int {
	out := map[string]int{}
	for _, i := range idx {
		out[s.serial[i]] = reason
	}
	return out
}

func sameListing(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A CRL built from the one before lists what a CRL built from the whole
// ledger lists: the revocations since the last one are on it, an entry
// whose certificate expired CRLKeepsExpired ago leaves it, and cRLNumber
// still increases.
func TestACRLBuiltFromTheLastOneListsEveryRevocationAndDropsTheExpired(t *testing.T) {
	s := newCRLScene(t, []time.Duration{48 * time.Hour, 20 * time.Minute, 48 * time.Hour, 48 * time.Hour})
	s.revoke(t, 4, 0, 1)
	// Certificate 1 expired, but not CRLKeepsExpired ago: still listed.
	s.clk.Advance(CRLKeepsExpired)
	first, delta := s.regenerate(t)
	if delta || !sameListing(listed(first), s.want(4, 0, 1)) {
		t.Fatalf("the first CRL lists %v (from the last one: %v); want 0 and 1, read in full", listed(first), delta)
	}

	s.clk.Advance(time.Minute)
	s.revoke(t, 1, 2)
	second, delta := s.regenerate(t)
	want := s.want(4, 0, 1)
	want[s.serial[2]] = 1
	if !delta || !sameListing(listed(second), want) {
		t.Errorf("after a revocation the CRL lists %v (from the last one: %v); want %v, built from the last one", listed(second), delta, want)
	}

	// CRLKeepsExpired past certificate 1's notAfter its entry leaves the
	// CRL (within crlFullEvery of the first CRL, which read the ledger in
	// full).
	s.clk.Advance(20 * time.Minute)
	third, delta := s.regenerate(t)
	delete(want, s.serial[1])
	if !delta || !sameListing(listed(third), want) {
		t.Errorf("past a certificate's notAfter the CRL lists %v (from the last one: %v); want %v, built from the last one", listed(third), delta, want)
	}

	// What a server starting now (keeping nothing) builds from the
	// ledger is the same list, in the same order.
	s.clk.Advance(time.Minute)
	s.open(t)
	fresh, delta := s.regenerate(t)
	if delta {
		t.Error("a server that has just started built its first CRL from entries it cannot have kept")
	}
	if !slices.EqualFunc(third.RevokedCertificateEntries, fresh.RevokedCertificateEntries, func(a, b x509.RevocationListEntry) bool {
		return a.SerialNumber.Cmp(b.SerialNumber) == 0 && a.RevocationTime.Equal(b.RevocationTime) && a.ReasonCode == b.ReasonCode
	}) {
		t.Errorf("the CRL built from the last one lists %v; the one read in full %v", listed(third), listed(fresh))
	}

	numbers := []*big.Int{first.Number, second.Number, third.Number, fresh.Number}
	for i := 1; i < len(numbers); i++ {
		if numbers[i].Cmp(numbers[i-1]) <= 0 {
			t.Errorf("cRLNumbers %v; want them strictly increasing", numbers)
		}
	}
}

// A revoked certificate stays on the CRLs for CRLKeepsExpired past its
// notAfter, so that a CRL issued after it expired lists it (RFC 5280
// §3.3: an entry is not removed until it has appeared on one), whether
// the CRL is built from the last one or from the whole ledger.
func TestARevokedCertificateStaysOnTheCRLsForADayPastItsNotAfter(t *testing.T) {
	const lifetime = 2 * time.Hour
	for _, tc := range []struct {
		name     string
		after    time.Duration // from the certificate's notAfter to the CRL
		onTheCRL bool
	}{
		{"a CRL built before the certificate expires lists it", -time.Minute, true},
		{"a CRL built a minute after it expired still lists it", time.Minute, true},
		{"a CRL built just under a day after it expired still lists it", CRLKeepsExpired - time.Minute, true},
		{"a CRL built a day and a minute after it expired leaves it off", CRLKeepsExpired + time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCRLScene(t, []time.Duration{lifetime, 48 * time.Hour})
			s.revoke(t, 1, 0, 1)
			want := s.want(1, 1)
			if tc.onTheCRL {
				want = s.want(1, 0, 1)
			}
			// The first CRL of a server, read in full, and one built
			// from it.
			s.clk.Advance(lifetime + tc.after)
			if full, _ := s.regenerate(t); !sameListing(listed(full), want) {
				t.Errorf("the CRL read in full lists %v; want %v", listed(full), want)
			}
			if kept, delta := s.regenerate(t); !delta || !sameListing(listed(kept), want) {
				t.Errorf("the CRL built from the last one (%v) lists %v; want %v", delta, listed(kept), want)
			}
			// A signer that takes no encoded entries: an x509 template.
			s.signer2 = unencodedSigner{s.signer}
			s.open(t)
			crl, err := s.au.RegenerateCRL(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := x509.ParseRevocationList(crl.DER)
			if err != nil || !sameListing(listed(parsed), want) {
				t.Errorf("the CRL signed from a template lists %v (%v); want %v", listed(parsed), err, want)
			}
		})
	}
}

// What the store cannot check (a reason changed while a CRL was built
// and then hidden by another publisher's CRL, say) lasts no longer than
// crlFullEvery: then the ledger is read in full again. A reason change
// the store sees makes the next CRL read in full at once.
func TestTheLedgerIsReadInFullAfterAReasonChangeAndEveryCRLFullEvery(t *testing.T) {
	s := newCRLScene(t, []time.Duration{48 * time.Hour, 48 * time.Hour})
	s.revoke(t, 4, 0, 1)
	s.regenerate(t)
	if _, delta := s.regenerate(t); !delta {
		t.Fatal("a CRL right after another was read in full")
	}

	c, err := s.db.CertificateOfOrder(context.Background(), s.certs[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.ChangeRevocationReason(context.Background(), c.ID, 1, store.AuditEvent{At: s.clk.Now(),
		Event: "revocation_reason_changed", Outcome: "success"}); err != nil {
		t.Fatal(err)
	}
	crl, delta := s.regenerate(t)
	want := s.want(4, 0)
	want[s.serial[1]] = 1
	if delta || !sameListing(listed(crl), want) {
		t.Errorf("after a reason change the CRL lists %v (from the last one: %v); want %v, read in full", listed(crl), delta, want)
	}

	s.clk.Advance(crlFullEvery - time.Second)
	if _, delta := s.regenerate(t); !delta {
		t.Error("a CRL less than crlFullEvery after the last full read was read in full")
	}
	s.clk.Advance(time.Second)
	if crl, delta := s.regenerate(t); delta || !sameListing(listed(crl), want) {
		t.Errorf("crlFullEvery after the last full read the CRL lists %v (from the last one: %v); want %v, read in full", listed(crl), delta, want)
	}
}

// BenchmarkCRLRegenerationOf100000Entries measures one regeneration of a
// CRL of 100,000 entries through the authority and the store (the ledger
// read, encoding, signing, storing the CRL): read in full, and built from
// the entries kept of the last one, with none or 10 revocations since.
func BenchmarkCRLRegenerationOf100000Entries(b *testing.B) {
	const n, spare = 100000, 5000
	lives := make([]time.Duration, n+spare)
	for i := range lives {
		lives[i] = 30 * 24 * time.Hour
	}
	s := newCRLScene(b, lives)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	s.revoke(b, 4, all...)
	next := n
	ctx := context.Background()
	keyID := signer.CAKeyID(s.ca)
	for _, c := range []struct {
		name  string
		added int
		full  bool
	}{
		{"full", 0, true},
		{"kept", 0, false},
		{"kept+10", 10, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := s.au.RegenerateCRL(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if c.added > 0 {
					b.StopTimer()
					if next+c.added > len(lives) {
						b.Fatalf("the benchmark ran out of its %d spare certificates; run it with a smaller -benchtime", spare)
					}
					idx := make([]int, c.added)
					for i := range idx {
						idx[i] = next
						next++
					}
					s.revoke(b, 4, idx...)
					b.StartTimer()
				}
				if c.full {
					s.au.crls.mu.Lock()
					s.au.crls.built = nil
					s.au.crls.mu.Unlock()
				}
				crl, err := s.au.RegenerateCRL(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if k := s.au.crls.lastBuilt(keyID); k.delta == c.full || crl.Entries < n {
					b.Fatalf("CRL #%d of %d entries, built from the last one: %v", crl.Number, crl.Entries, k.delta)
				}
			}
		})
	}
}

// unencodedSigner is the local CA, but one that cannot sign a CRL from
// encoded entries (as a signer would for a template it leaves to x509).
type unencodedSigner struct{ *localca.Signer }

func (unencodedSigner) SignEncodedCRL(context.Context, string, *x509.RevocationList, [][]byte) ([]byte, error) {
	return nil, fmt.Errorf("test: %w", errors.ErrUnsupported)
}

// A signer that cannot take encoded entries still gets its CRL: from
// an x509 template of every unexpired entry, each time.
func TestASignerThatCannotSignEncodedEntriesStillPublishesTheCRL(t *testing.T) {
	s := newCRLScene(t, []time.Duration{48 * time.Hour, 48 * time.Hour})
	s.signer2 = unencodedSigner{s.signer}
	s.open(t)
	s.revoke(t, 4, 0)
	for i, want := range []map[string]int{s.want(4, 0), s.want(4, 0, 1)} {
		if i == 1 {
			s.revoke(t, 4, 1)
		}
		crl, err := s.au.RegenerateCRL(context.Background())
		if err != nil {
			t.Fatalf("CRL %d: %v", i, err)
		}
		parsed, err := x509.ParseRevocationList(crl.DER)
		if err != nil {
			t.Fatalf("CRL %d does not parse: %v", i, err)
		}
		if err := parsed.CheckSignatureFrom(s.ca); err != nil || !sameListing(listed(parsed), want) {
			t.Errorf("CRL %d lists %v (signature: %v); want %v", i, listed(parsed), err, want)
		}
	}
}
