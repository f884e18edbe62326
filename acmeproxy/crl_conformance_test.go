package acmeproxy

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"maps"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
	"github.com/zmap/zlint/v3/lint"
)

// crlCAKeys are the kinds of key a local CA may sign with (Caddy's pki
// CA is ECDSA P-256; an imported one may be any), each with the
// signature algorithm its CRLs must carry.
var crlCAKeys = []struct {
	name string
	key  func() crypto.Signer
	alg  x509.SignatureAlgorithm
}{
	{"ECDSA P-256", func() crypto.Signer { k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader); return k }, x509.ECDSAWithSHA256},
	{"ECDSA P-384", func() crypto.Signer { k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader); return k }, x509.ECDSAWithSHA384},
	{"RSA 2048", func() crypto.Signer { k, _ := rsa.GenerateKey(rand.Reader, 2048); return k }, x509.SHA256WithRSA},
	{"Ed25519", func() crypto.Signer { _, k, _ := ed25519.GenerateKey(rand.Reader); return k }, x509.PureEd25519},
}

// newTestCAWithKey is newTestCAAt for a CA with key.
func newTestCAWithKey(t testing.TB, now time.Time, key crypto.Signer) *testCA {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "acmeproxy CRL test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{root: root, src: localca.Static([]*x509.Certificate{root}, key)}
}

// publishedCRL is a CRL the local CA published in one of the situations
// publishedCRLs goes through, with the reason each serial it must list
// is revoked for (0: listed without a reasonCode).
type publishedCRL struct {
	name    string
	der     []byte
	reasons map[string]int // by serial, in hex
}

// publishedCRLs has the local CA of a profile, with a CA holding key,
// publish its CRLs on two instances sharing one database of the running
// test's dialect, through the authority's own publishing: empty; listing
// a revocation of each reason the project records (none given,
// unspecified, keyCompromise, affiliationChanged, superseded,
// cessationOfOperation, privilegeWithdrawn, a reason changed to
// keyCompromise, a ledger row holding removeFromCRL from an older
// version), and serials of 20 octets, with the top bit set, and of one
// octet; regenerated; regenerated at the other instance; and back at the
// first, which had built the one before that. It returns them in the
// order they were published, and the CA.
func publishedCRLs(t *testing.T, key crypto.Signer) ([]publishedCRL, *x509.Certificate) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := clocktest.New(time.Now().UTC().Truncate(time.Second))
	ca := newTestCAWithKey(t, clk.Now(), key)
	withClock := func(o *Options) { o.Clock = clk }
	place := newPlace(t)
	a := newTestEnvWith(t, envOptions{dbPath: place, ca: ca, opts: withClock})
	b := newTestEnvWith(t, envOptions{dbPath: place, ca: ca, opts: withClock})
	admin := authority.Actor{Kind: authority.ActorAdmin, ID: "test"}

	var out []publishedCRL
	publish := func(name string, e *testEnv, reasons map[string]int) {
		t.Helper()
		crl, err := e.srv.Authority().RegenerateCRL(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, publishedCRL{name: name, der: crl.DER, reasons: reasons})
		clk.Advance(time.Second)
	}
	publish("empty", a, nil)

	intp := func(n int) *int { return &n }
	random := func() *big.Int {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		b[0] = b[0]&0x7f | 0x01
		return new(big.Int).SetBytes(b)
	}
	twenty := new(big.Int).SetBytes(bytes.Repeat([]byte{0x7f}, 20))            // the longest serial RFC 5280 §4.1.2.2 allows
	topBit := new(big.Int).SetBytes(append([]byte{0x80}, make([]byte, 15)...)) // 17 octets in DER
	revocations := []struct {
		serial *big.Int
		reason *int
		crl    int // the reason the CRL must show
	}{
		{random(), nil, 0},
		{random(), intp(0), 0},
		{random(), intp(1), 1},
		{random(), intp(3), 3},
		{random(), intp(4), 4},
		{random(), intp(5), 5},
		{random(), intp(9), 9},
		{twenty, intp(4), 4},
		{topBit, nil, 0},
		{big.NewInt(1), intp(5), 5},
	}
	serials := make([]*big.Int, 0, len(revocations)+2)
	for _, r := range revocations {
		serials = append(serials, r.serial)
	}
	serials = append(serials, random(), random()) // changed to keyCompromise; removeFromCRL
	orders, leaves := a.seedLeavesAt(ctx, clk.Now(), serials)
	reasons := map[string]int{}
	for i, r := range revocations {
		if _, err := a.srv.Authority().RevokeOrder(ctx, orders[i].ID, r.reason, admin); err != nil {
			t.Fatalf("revoking serial %x with reason %v: %v", r.serial, r.reason, err)
		}
		reasons[hex.EncodeToString(r.serial.Bytes())] = r.crl
	}
	changed, legacy := len(revocations), len(revocations)+1
	for _, reason := range []int{4, 1} {
		if _, err := a.srv.Authority().RevokeOrder(ctx, orders[changed].ID, &reason, admin); err != nil {
			t.Fatalf("revoking with reason %d: %v", reason, err)
		}
	}
	reasons[hex.EncodeToString(serials[changed].Bytes())] = 1
	stored, err := a.db.CertificateOfOrder(ctx, orders[legacy].ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.db.RevokeCertificate(ctx, store.Revocation{
		CertificateID: stored.ID, Profile: stored.Profile, OrderID: stored.OrderID, Serial: stored.Serial,
		IssuerKeyID: signer.LeafIssuerKeyID(leaves[legacy]), Reason: intp(8), RevokedAt: clk.Now(), NotAfter: stored.NotAfter,
		ActorKind: authority.ActorAccount, ActorID: "legacy",
	}, store.AuditEvent{At: clk.Now(), Event: vocab.EventCertificateRevoked, Outcome: authority.OutcomeSuccess}); err != nil {
		t.Fatal(err)
	}
	reasons[stored.Serial] = 0

	publish("with every reason", a, reasons)
	publish("regenerated", a, reasons)
	publish("at the other instance", b, reasons)
	publish("back at the first instance", a, reasons)
	return out, ca.root
}

// Every CRL the local CA publishes passes every CRL lint of zlint (the
// version go.mod names): no error and no warning. Together the CRLs
// exercise every one of them: a lint that applies to none (a CA key or
// a CRL shape missing from publishedCRLs, or one zlint added) fails the
// test, so that "passes" keeps meaning "checked".
func TestEveryCRLTheLocalCAPublishesPassesEveryZlintCRLLint(t *testing.T) {
	var (
		mu     sync.Mutex
		passed = map[string]bool{}
	)
	eachDialect(t, func(t *testing.T) {
		for _, k := range crlCAKeys {
			t.Run(k.name, func(t *testing.T) {
				crls, _ := publishedCRLs(t, k.key())
				for _, c := range crls {
					t.Run(c.name, func(t *testing.T) {
						ran := lintcheck.CRLPassed(t, c.der, nil)
						mu.Lock()
						defer mu.Unlock()
						for _, name := range ran {
							passed[name] = true
						}
					})
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	all := lint.GlobalRegistry().RevocationListLints().Names()
	var never []string
	for _, name := range all {
		if !passed[name] {
			never = append(never, name)
		}
	}
	if len(never) > 0 {
		t.Errorf("zlint CRL lints that applied to none of the CRLs: %v", never)
	}
	t.Logf("%d zlint CRL lints ran and passed: %v", len(passed), slices.Sorted(maps.Keys(passed)))
}

var (
	oidCRLNumber              = asn1.ObjectIdentifier{2, 5, 29, 20}
	oidAuthorityKeyIdentifier = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidCRLReason              = asn1.ObjectIdentifier{2, 5, 29, 21}
)

// The CRLs the local CA publishes have the profile of RFC 5280 §5, read
// from their DER: v2; signed with the algorithm the CA's key calls for,
// named alike inside and outside the signed part; the CA's name as
// issuer; thisUpdate, nextUpdate and every revocationDate as UTCTime
// before 2050; an authority key identifier with the CA's key identifier
// only and a cRLNumber, neither critical, and no other extension (the
// README promises no issuing distribution point: these are complete
// CRLs of their CA); the revocations with their reason, unspecified (0)
// as no reasonCode at all; and cRLNumbers that grow from one CRL to the
// next, whichever instance sharing the database builds it.
func TestTheLocalCAsCRLsHaveTheRFC5280Profile(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		for _, k := range crlCAKeys {
			t.Run(k.name, func(t *testing.T) {
				crls, ca := publishedCRLs(t, k.key())
				var last *big.Int
				for _, c := range crls {
					t.Run(c.name, func(t *testing.T) {
						checkCRLProfile(t, c, ca, k.alg)
					})
					crl, err := x509.ParseRevocationList(c.der)
					if err != nil {
						t.Fatal(err)
					}
					if last != nil && crl.Number.Cmp(last) <= 0 {
						t.Errorf("CRL %q has cRLNumber %v after %v; RFC 5280 §5.2.3 wants it to grow", c.name, crl.Number, last)
					}
					last = crl.Number
				}
			})
		}
	})
}

// checkCRLProfile checks one CRL against RFC 5280 §5 (see
// TestTheLocalCAsCRLsHaveTheRFC5280Profile).
func checkCRLProfile(t *testing.T, c publishedCRL, ca *x509.Certificate, alg x509.SignatureAlgorithm) {
	t.Helper()
	crl, err := x509.ParseRevocationList(c.der)
	if err != nil {
		t.Fatalf("the CRL does not parse: %v", err)
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		t.Errorf("the CRL's signature does not verify with the CA's key: %v", err)
	}
	if crl.SignatureAlgorithm != alg {
		t.Errorf("signature algorithm %v; want %v for the CA's key", crl.SignatureAlgorithm, alg)
	}

	// CertificateList ::= SEQUENCE { tbsCertList, signatureAlgorithm, signatureValue }
	in := cryptobyte.String(c.der)
	var list, tbs, outerAlg, innerAlg, issuer cryptobyte.String
	var version int64
	if !in.ReadASN1(&list, cbasn1.SEQUENCE) || !in.Empty() ||
		!list.ReadASN1(&tbs, cbasn1.SEQUENCE) || !list.ReadASN1Element(&outerAlg, cbasn1.SEQUENCE) {
		t.Fatal("the CRL is not a CertificateList")
	}
	if !tbs.PeekASN1Tag(cbasn1.INTEGER) || !tbs.ReadASN1Integer(&version) || version != 1 {
		t.Errorf("the CRL's version is absent or not v2 (1): %d; RFC 5280 §5.1.2.1 wants v2 with extensions", version)
	}
	if !tbs.ReadASN1Element(&innerAlg, cbasn1.SEQUENCE) || !tbs.ReadASN1Element(&issuer, cbasn1.SEQUENCE) {
		t.Fatal("the CRL's tbsCertList has no signature algorithm or issuer")
	}
	if !bytes.Equal(innerAlg, outerAlg) {
		t.Errorf("tbsCertList.signature %x differs from signatureAlgorithm %x (RFC 5280 §5.1.1.2)", []byte(innerAlg), []byte(outerAlg))
	}
	if !bytes.Equal(issuer, ca.RawSubject) {
		t.Errorf("the CRL's issuer is not the CA's subject (RFC 5280 §5.1.2.3)")
	}
	checkTime(t, "thisUpdate", &tbs)
	checkTime(t, "nextUpdate", &tbs)
	var entries cryptobyte.String
	var hasEntries bool
	if !tbs.ReadOptionalASN1(&entries, &hasEntries, cbasn1.SEQUENCE) {
		t.Fatal("unreadable revokedCertificates")
	}
	if hasEntries && entries.Empty() {
		t.Error("revokedCertificates is present but empty; RFC 5280 §5.1.2.6 wants it absent")
	}
	for !entries.Empty() {
		var entry cryptobyte.String
		serial := new(big.Int)
		if !entries.ReadASN1(&entry, cbasn1.SEQUENCE) || !entry.ReadASN1Integer(serial) {
			t.Fatal("unreadable CRL entry")
		}
		checkTime(t, "revocationDate of "+serial.Text(16), &entry)
		if len(serial.Bytes()) > 20 || serial.Sign() <= 0 {
			t.Errorf("serial %x is not a positive integer of at most 20 octets", serial)
		}
		if !entry.Empty() {
			var exts cryptobyte.String
			if !entry.ReadASN1(&exts, cbasn1.SEQUENCE) || exts.Empty() {
				t.Errorf("entry %x has an empty crlEntryExtensions", serial)
			}
		}
	}
	var hasExts bool
	var exts cryptobyte.String
	if !tbs.ReadOptionalASN1(&exts, &hasExts, cbasn1.Tag(0).Constructed().ContextSpecific()) || !hasExts || !tbs.Empty() {
		t.Fatal("the CRL has no crlExtensions, or something after them")
	}

	var ids []string
	for _, ext := range crl.Extensions {
		ids = append(ids, ext.Id.String())
		if ext.Critical {
			t.Errorf("extension %v is critical; neither the AKI nor the cRLNumber may be (RFC 5280 §5.2.1, §5.2.3)", ext.Id)
		}
		if ext.Id.Equal(oidAuthorityKeyIdentifier) {
			var aki struct {
				KeyID []byte `asn1:"optional,tag:0"`
			}
			if rest, err := asn1.Unmarshal(ext.Value, &aki); err != nil || len(rest) > 0 {
				t.Errorf("authority key identifier %x holds more than a keyIdentifier (%v)", ext.Value, err)
			}
		}
	}
	if want := []string{oidCRLNumber.String(), oidAuthorityKeyIdentifier.String()}; !slices.Equal(slices.Sorted(slices.Values(ids)), want) {
		t.Errorf("CRL extensions %v; want exactly the authority key identifier and the cRLNumber %v", ids, want)
	}
	if !bytes.Equal(crl.AuthorityKeyId, ca.SubjectKeyId) {
		t.Errorf("authority key identifier %x; want the CA's subject key identifier %x (RFC 5280 §5.2.1)", crl.AuthorityKeyId, ca.SubjectKeyId)
	}
	if crl.Number == nil || crl.Number.Sign() < 0 || len(crl.Number.Bytes()) > 20 {
		t.Errorf("cRLNumber %v is not a non-negative integer of at most 20 octets (RFC 5280 §5.2.3)", crl.Number)
	}
	if !crl.NextUpdate.After(crl.ThisUpdate) {
		t.Errorf("nextUpdate %v is not after thisUpdate %v", crl.NextUpdate, crl.ThisUpdate)
	}

	listed := map[string]int{}
	for _, e := range crl.RevokedCertificateEntries {
		listed[hex.EncodeToString(e.SerialNumber.Bytes())] = e.ReasonCode
		if e.RevocationTime.After(crl.ThisUpdate) {
			t.Errorf("entry %x is revoked at %v, after the CRL's thisUpdate %v", e.SerialNumber, e.RevocationTime, crl.ThisUpdate)
		}
		for _, ext := range e.Extensions {
			if ext.Id.Equal(oidCRLReason) && bytes.Equal(ext.Value, []byte{0x0a, 0x01, 0x00}) {
				t.Errorf("entry %x has reasonCode unspecified; RFC 5280 §5.3.1 wants the extension absent", e.SerialNumber)
			}
		}
	}
	if c.reasons == nil {
		c.reasons = map[string]int{}
	}
	if !maps.Equal(listed, c.reasons) {
		t.Errorf("the CRL lists (serial: reason) %v; want %v", listed, c.reasons)
	}
}

// checkTime reads a Time from s and checks its encoding: UTCTime for a
// year before 2050, GeneralizedTime from then on (RFC 5280 §5.1.2.4–6),
// in UTC (Z) with seconds.
func checkTime(t *testing.T, what string, s *cryptobyte.String) {
	t.Helper()
	var tag cbasn1.Tag
	var raw cryptobyte.String
	if !s.ReadAnyASN1(&raw, &tag) {
		t.Fatalf("%s is missing", what)
	}
	switch tag {
	case cbasn1.UTCTime:
		if _, err := time.Parse("060102150405Z", string(raw)); err != nil {
			t.Errorf("%s is the UTCTime %q, not YYMMDDHHMMSSZ", what, raw)
		}
	case cbasn1.GeneralizedTime:
		at, err := time.Parse("20060102150405Z", string(raw))
		if err != nil {
			t.Errorf("%s is the GeneralizedTime %q, not YYYYMMDDHHMMSSZ", what, raw)
		} else if at.Year() < 2050 {
			t.Errorf("%s is the GeneralizedTime %q; a year before 2050 must be a UTCTime", what, raw)
		}
	default:
		t.Fatalf("%s has tag %v, not a Time", what, tag)
	}
}

// Instances sharing a database do not share a clock: one that runs a
// second behind the instance that recorded a revocation builds a CRL
// whose thisUpdate is earlier than the revocation's time. The CRL still
// lists the revocation, as revoked no later than its thisUpdate: a CRL
// saying a certificate was revoked after the CRL was issued breaks RFC
// 5280 §5.1.2.4/§5.1.2.6 (zlint's e_crl_revocation_time_after_this_update).
func TestACRLBuiltOnAClockBehindTheRevokingInstancesListsTheRevocationByItsThisUpdate(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now().UTC().Truncate(time.Second)
		behind, ahead := clocktest.New(start), clocktest.New(start.Add(time.Second))
		place := newPlace(t)
		ca := newTestCAWithKey(t, start, crlCAKeys[0].key())
		a := newTestEnvWith(t, envOptions{dbPath: place, ca: ca, opts: func(o *Options) { o.Clock = ahead }})
		b := newTestEnvWith(t, envOptions{dbPath: place, ca: ca, opts: func(o *Options) { o.Clock = behind }})
		orders, leaves := a.seedLeavesAt(ctx, start, []*big.Int{big.NewInt(0x1234)})
		if _, err := a.srv.Authority().RevokeOrder(ctx, orders[0].ID, nil, authority.Actor{Kind: authority.ActorAdmin, ID: "test"}); err != nil {
			t.Fatal(err)
		}
		stored, err := b.srv.Authority().RegenerateCRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		crl, err := x509.ParseRevocationList(stored.DER)
		if err != nil {
			t.Fatal(err)
		}
		got := mustEntry(t, crl, leaves[0].SerialNumber)
		if got.RevocationTime.After(crl.ThisUpdate) {
			t.Errorf("the CRL lists the revocation at %v, after its thisUpdate %v", got.RevocationTime, crl.ThisUpdate)
		}
		lintcheck.CRL(t, stored.DER, nil)
	})
}

// RFC 5280 §5.1.2.4–6 encodes a CRL's times as UTCTime through 2049 and
// as GeneralizedTime from 2050 on: a CRL built on the last day of 2049
// has a thisUpdate of the one and a nextUpdate of the other, and one
// built in 2050 lists a revocation of 2049 as UTCTime beside one of 2050
// as GeneralizedTime.
func TestCRLTimesTurnGeneralizedIn2050(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := clocktest.New(time.Date(2049, 12, 31, 12, 0, 0, 0, time.UTC))
	ca := newTestCAWithKey(t, clk.Now(), crlCAKeys[0].key())
	e := newTestEnvWith(t, envOptions{ca: ca, opts: func(o *Options) { o.Clock = clk }})
	admin := authority.Actor{Kind: authority.ActorAdmin, ID: "test"}
	revoke := func(serial int64) {
		t.Helper()
		orders, _ := e.seedLeavesAt(ctx, clk.Now(), []*big.Int{big.NewInt(serial)})
		if _, err := e.srv.Authority().RevokeOrder(ctx, orders[0].ID, nil, admin); err != nil {
			t.Fatal(err)
		}
	}
	publish := func() []byte {
		t.Helper()
		crl, err := e.srv.Authority().RegenerateCRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return crl.DER
	}
	clk.Advance(11 * time.Hour) // 2049-12-31T23:00:00Z
	revoke(0x2049)
	in2049 := publish()
	clk.Advance(2 * time.Hour) // 2050-01-01T01:00:00Z
	revoke(0x2050)
	in2050 := publish()

	for _, c := range []struct {
		name    string
		der     []byte
		want    []cbasn1.Tag // thisUpdate, nextUpdate, then each entry's revocationDate
		reasons map[string]int
	}{
		{"ok/a CRL of 2049 that is valid into 2050", in2049, []cbasn1.Tag{cbasn1.UTCTime, cbasn1.GeneralizedTime, cbasn1.UTCTime},
			map[string]int{"2049": 0}},
		{"ok/a CRL of 2050 listing a revocation of 2049", in2050, []cbasn1.Tag{cbasn1.GeneralizedTime, cbasn1.GeneralizedTime, cbasn1.UTCTime, cbasn1.GeneralizedTime},
			map[string]int{"2049": 0, "2050": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := crlTimeTags(t, c.der); !slices.Equal(got, c.want) {
				t.Errorf("time encodings %v; want %v (UTCTime %v, GeneralizedTime %v)", got, c.want, cbasn1.UTCTime, cbasn1.GeneralizedTime)
			}
			lintcheck.CRL(t, c.der, nil)
			checkCRLProfile(t, publishedCRL{der: c.der, reasons: c.reasons}, ca.root, crlCAKeys[0].alg)
		})
	}
}

// crlTimeTags are the tags of a CRL's thisUpdate, nextUpdate and each
// entry's revocationDate, in that order.
func crlTimeTags(t *testing.T, der []byte) []cbasn1.Tag {
	t.Helper()
	in := cryptobyte.String(der)
	var list, tbs, skip, entries cryptobyte.String
	var tags []cbasn1.Tag
	var tag cbasn1.Tag
	if !in.ReadASN1(&list, cbasn1.SEQUENCE) || !list.ReadASN1(&tbs, cbasn1.SEQUENCE) ||
		!tbs.SkipASN1(cbasn1.INTEGER) || !tbs.SkipASN1(cbasn1.SEQUENCE) || !tbs.SkipASN1(cbasn1.SEQUENCE) {
		t.Fatal("unreadable CRL")
	}
	for range 2 {
		if !tbs.ReadAnyASN1(&skip, &tag) {
			t.Fatal("unreadable CRL times")
		}
		tags = append(tags, tag)
	}
	var present bool
	if !tbs.ReadOptionalASN1(&entries, &present, cbasn1.SEQUENCE) {
		t.Fatal("unreadable revokedCertificates")
	}
	for !entries.Empty() {
		var entry cryptobyte.String
		if !entries.ReadASN1(&entry, cbasn1.SEQUENCE) || !entry.SkipASN1(cbasn1.INTEGER) || !entry.ReadAnyASN1(&skip, &tag) {
			t.Fatal("unreadable CRL entry")
		}
		tags = append(tags, tag)
	}
	return tags
}
