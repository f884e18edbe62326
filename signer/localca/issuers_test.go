package localca

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// renewed returns ca's intermediate renewed as Caddy's pki app renews it:
// the same name under the same root, a new key, valid from notBefore to
// notAfter.
func renewed(t testing.TB, ca *testCA, notBefore, notAfter time.Time) *testCA {
	t.Helper()
	next := &testCA{root: ca.root, rootKey: ca.rootKey, interKey: newKey(t, "p256")}
	next.inter = createCert(t, &x509.Certificate{
		Subject:               ca.inter.Subject,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}, ca.root, next.interKey.Public(), ca.rootKey)
	return next
}

// rotating is a Source whose CA the test replaces, as Caddy's pki app or
// an operator replacing PEM files does.
type rotating struct {
	mu sync.Mutex
	ca *testCA
}

func (r *rotating) set(ca *testCA) { r.mu.Lock(); r.ca = ca; r.mu.Unlock() }

func (r *rotating) source(context.Context) (Issuer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Issuer{Chain: r.ca.chain(), Key: r.ca.interKey}, nil
}

func bound(t testing.TB, s *Signer, profile string) *Signer {
	t.Helper()
	if err := s.Bind(signer.Binding{Profile: profile}); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	return s
}

// signCRL has s sign a CRL of the CA named keyID listing serial, and
// checks it is signed by ca and lints clean.
func signCRL(t *testing.T, s *Signer, keyID string, ca *x509.Certificate, serial *big.Int) *x509.RevocationList {
	t.Helper()
	der, err := s.SignCRL(t.Context(), keyID, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: testNow, NextUpdate: testNow.Add(24 * time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: serial, RevocationTime: testNow}},
	})
	if err != nil {
		t.Fatalf("SignCRL(%s): %v", keyID, err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		t.Errorf("the CRL of %s is not signed by the CA that issued its leaves: %v", keyID, err)
	}
	lintcheck.CRL(t, der, nil)
	return crl
}

func keyIDs(infos []signer.IssuerInfo) []string {
	var ids []string
	for _, i := range infos {
		ids = append(ids, i.KeyID)
	}
	slices.Sort(ids)
	return ids
}

func TestARenewedCAStillSignsTheCRLOfItsOldLeavesAfterARestart(t *testing.T) {
	ctx := t.Context()
	storage := &certmagic.FileStorage{Path: t.TempDir()}
	old := defaultCA(t)
	next := renewed(t, old, testNow.AddDate(0, -1, 0), testNow.AddDate(2, 0, 0))
	src := &rotating{ca: old}
	s := bound(t, newSigner(t, src.source, Options{Storage: storage}), "p")
	oldLeaf := issue(t, s, issueRequest(t, newKey(t, "p256"), dns("old.example.com")))[0]
	src.set(next)
	newLeaf := issue(t, s, issueRequest(t, newKey(t, "p256"), dns("new.example.com")))[0]

	// A new process: its source knows only the renewed CA.
	restarted := bound(t, newSigner(t, src.source, Options{Storage: storage}), "p")
	for _, tc := range []struct {
		name string
		leaf *x509.Certificate
		ca   *x509.Certificate
	}{
		{"ok/the retired CA, from storage", oldLeaf, old.inter},
		{"ok/the current CA", newLeaf, next.inter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := signer.LeafIssuerKeyID(tc.leaf)
			info, err := restarted.LookupCRLIssuer(ctx, id)
			if err != nil {
				t.Fatalf("LookupCRLIssuer: %v", err)
			}
			if info.KeyID != id || !info.NotAfter.Equal(tc.ca.NotAfter) || info.NameID != signer.CANameID(tc.ca) {
				t.Errorf("issuer %+v; want key id %s, notAfter %v", info, id, tc.ca.NotAfter)
			}
			signCRL(t, restarted, id, tc.ca, tc.leaf.SerialNumber)
		})
	}
	issuers, err := restarted.CRLIssuers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{signer.CAKeyID(old.inter), signer.CAKeyID(next.inter)}
	slices.Sort(want)
	if got := keyIDs(issuers); !slices.Equal(got, want) {
		t.Errorf("CRL issuers %v; want both CAs %v", got, want)
	}
	if issuers[0].NameID != issuers[1].NameID {
		t.Errorf("a CA renewed under its name has name ids %s and %s; want one, so cRLNumber continues", issuers[0].NameID, issuers[1].NameID)
	}
}

// failingStorage fails what the test says, and counts loads.
type failingStorage struct {
	memStorage
	store, load error
	loads       []string
}

func (f *failingStorage) Store(ctx context.Context, key string, v []byte) error {
	if f.store != nil {
		return f.store
	}
	return f.memStorage.Store(ctx, key, v)
}

func (f *failingStorage) Load(ctx context.Context, key string) ([]byte, error) {
	f.loads = append(f.loads, key)
	if f.load != nil {
		return nil, f.load
	}
	return f.memStorage.Load(ctx, key)
}

func TestNoLeafIsReturnedWhoseCACouldNotBeRecorded(t *testing.T) {
	storage := &failingStorage{store: errors.New("disk full")}
	s := bound(t, newSigner(t, defaultCA(t).source(), Options{Storage: storage}), "p")
	out, err := s.Issue(t.Context(), issueRequest(t, newKey(t, "p256"), dns("www.example.com")))
	e, ok := signer.AsError(err)
	if !ok || e.Kind != signer.KindUnavailable || len(out.Chain) != 0 {
		t.Fatalf("Issue with storage failing: %v, %d certificates; want KindUnavailable and no leaf", err, len(out.Chain))
	}
	if !strings.Contains(err.Error(), "disk full") {
		t.Errorf("the error %q hides the storage's cause", err)
	}
}

func TestACAIsRetiredWhenItsCertificateExpires(t *testing.T) {
	ctx := t.Context()
	clk := clocktest.New(testNow)
	// A short-lived intermediate, renewed before it expires.
	old := newTestCA(t, testNow.Add(-time.Hour), testNow.Add(2*time.Hour))
	next := renewed(t, old, testNow, testNow.AddDate(0, 0, 7))
	src := &rotating{ca: old}
	s := bound(t, newSigner(t, src.source, Options{Clock: clk}), "p")
	leaf := issue(t, s, issueRequest(t, newKey(t, "p256"), dns("old.example.com")))[0]
	if !leaf.NotAfter.Equal(old.inter.NotAfter) {
		t.Fatalf("the leaf ends %v; want its CA's end %v", leaf.NotAfter, old.inter.NotAfter)
	}
	src.set(next)
	oldID, nextID := signer.CAKeyID(old.inter), signer.CAKeyID(next.inter)

	issuers, err := s.CRLIssuers(ctx)
	if want := []string{oldID, nextID}; err != nil || !slices.Equal(keyIDs(issuers), sorted(want)) {
		t.Fatalf("before the old CA expires: %v, %v; want both", keyIDs(issuers), err)
	}
	signCRL(t, s, oldID, old.inter, leaf.SerialNumber)

	clk.Advance(2*time.Hour + time.Second)
	issuers, err = s.CRLIssuers(ctx)
	if err != nil || !slices.Equal(keyIDs(issuers), []string{nextID}) {
		t.Errorf("once the old CA expired: %v, %v; want only the current", keyIDs(issuers), err)
	}
	if _, err := s.SignCRL(ctx, oldID, &x509.RevocationList{Number: big.NewInt(2), ThisUpdate: clk.Now(), NextUpdate: clk.Now().Add(time.Hour)}); !errors.Is(err, signer.ErrIssuerRetired) {
		t.Errorf("SignCRL of the expired CA: %v; want ErrIssuerRetired", err)
	}
	if _, err := s.LookupCRLIssuer(ctx, oldID); err != nil {
		t.Errorf("the expired CA is still known (its leaves were issued here): %v", err)
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }

func TestLookupTellsAnUnknownCAFromOneWhoseKeyCannotBeRead(t *testing.T) {
	ctx := t.Context()
	old, other := defaultCA(t), defaultCA(t)
	next := renewed(t, old, testNow.AddDate(0, -1, 0), testNow.AddDate(2, 0, 0))
	oldID := signer.CAKeyID(old.inter)
	record := func(iss Issuer) []byte {
		rec, err := encodeRecord(iss)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	path := "acme_proxy/issuers/p/" + oldID + ".pem"
	// The old CA's chain with another CA's key.
	mismatched := append(certsPEM(old.chain()...), pkcs8PEM(t, other.interKey)...)
	tests := []struct {
		name   string
		keyID  string
		record []byte // stored at the old CA's path
		load   error
		want   error
	}{
		{"ok/a recorded CA", oldID, record(Issuer{Chain: old.chain(), Key: old.interKey}), nil, nil},
		{"fail/a CA never recorded", oldID, nil, nil, signer.ErrIssuerUnknown},
		{"fail/not a key id: storage is not asked", "../../pki/authorities/local/intermediate", nil, nil, signer.ErrIssuerUnknown},
		{"fail/storage cannot be read", oldID, nil, errors.New("connection refused"), signer.ErrIssuerUnavailable},
		{"fail/a record whose key is not its CA's", oldID, mismatched, nil, signer.ErrIssuerUnavailable},
		{"fail/a record of another CA under this key id", oldID, record(Issuer{Chain: other.chain(), Key: other.interKey}), nil, signer.ErrIssuerUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			storage := &failingStorage{}
			if tc.record != nil {
				_ = storage.memStorage.Store(ctx, path, tc.record)
			}
			storage.load = tc.load
			s := bound(t, newSigner(t, Static(next.chain(), next.interKey), Options{Storage: storage}), "p")
			info, err := s.LookupCRLIssuer(ctx, tc.keyID)
			if tc.want == nil {
				if err != nil || info.KeyID != oldID {
					t.Fatalf("LookupCRLIssuer: %+v, %v; want the old CA", info, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("LookupCRLIssuer: %v; want %v", err, tc.want)
			}
			if _, serr := s.SignCRL(ctx, tc.keyID, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: testNow, NextUpdate: testNow.Add(time.Hour)}); !errors.Is(serr, tc.want) {
				t.Errorf("SignCRL: %v; want %v", serr, tc.want)
			}
			// The record holds a key: no error may quote it.
			if tc.record != nil {
				for b, rest := pem.Decode(tc.record); b != nil; b, rest = pem.Decode(rest) {
					body := pem.EncodeToMemory(b)
					line := bytes.Split(body, []byte("\n"))[1]
					if strings.Contains(err.Error(), string(line)) {
						t.Errorf("the error quotes the record's %s block: %v", b.Type, err)
					}
				}
			}
			for _, k := range storage.loads {
				if !strings.HasPrefix(k, "acme_proxy/issuers/p/") {
					t.Errorf("storage was asked for %q, outside the profile's records", k)
				}
			}
		})
	}
}

func TestAProfilePublishesOnlyTheCAsItSignedWith(t *testing.T) {
	ctx := t.Context()
	storage := &certmagic.FileStorage{Path: t.TempDir()}
	caA, caB := defaultCA(t), defaultCA(t)
	a := bound(t, newSigner(t, caA.source(), Options{Storage: storage}), "a")
	b := bound(t, newSigner(t, caB.source(), Options{Storage: storage}), "b")
	issue(t, a, issueRequest(t, newKey(t, "p256"), dns("a.example.com")))
	issue(t, b, issueRequest(t, newKey(t, "p256"), dns("b.example.com")))

	// Profile a now issues from a new CA; b's CA was never a's.
	a2 := bound(t, newSigner(t, defaultCA(t).source(), Options{Storage: storage}), "a")
	issuers, err := a2.CRLIssuers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids := keyIDs(issuers); len(ids) != 2 || !slices.Contains(ids, signer.CAKeyID(caA.inter)) || slices.Contains(ids, signer.CAKeyID(caB.inter)) {
		t.Errorf("profile a publishes %v; want its current CA and %s, not b's %s", ids, signer.CAKeyID(caA.inter), signer.CAKeyID(caB.inter))
	}
	if _, err := a2.LookupCRLIssuer(ctx, signer.CAKeyID(caB.inter)); !errors.Is(err, signer.ErrIssuerUnknown) {
		t.Errorf("profile a looking up b's CA: %v; want ErrIssuerUnknown", err)
	}
	if err := a2.Bind(signer.Binding{Profile: "b"}); err == nil {
		t.Error("a signer bound to a was bound to b too")
	}
}
