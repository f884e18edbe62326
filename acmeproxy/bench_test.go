package acmeproxy

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"

	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Micro-benchmarks of the steps every certificate goes through. The
// full-flow comparison with Caddy's acme_server is in ../bench; the job
// queue's enqueue→claim is in ../jobs/bench_test.go.

// benchSyncModes are the SQLite synchronous settings compared: FULL is what
// the acme_proxy app opens its store with (an fsync per commit), NORMAL
// what WAL mode allows without losing consistency.
var benchSyncModes = []string{"FULL", "NORMAL"}

// benchFixture is one profile's Server over a real SQLite store on the
// ordinary disk, with one ECDSA P-256 account.
type benchFixture struct {
	srv    *Server
	db     *store.DB
	key    *ecdsa.PrivateKey
	acct   store.Account
	base   string
	kid    string
	signer *localca.Signer
}

func newBenchFixture(b *testing.B, synchronous string) *benchFixture {
	b.Helper()
	// Every limit off: these benchmarks measure the steps without them
	// (BenchmarkNewOrderLimits measures what the limits add), and run
	// more orders per account than the default limits let through.
	return newBenchFixtureWith(b, synchronous, everyLimitOff())
}

// newBenchFixtureWith is newBenchFixture with the profile's limits.
func newBenchFixtureWith(b *testing.B, synchronous string, limits *LimitsConfig) *benchFixture {
	b.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"), store.SQLiteOptions{Synchronous: synchronous})
	if err != nil {
		b.Fatal(err)
	}
	return newBenchFixtureOn(b, db, limits)
}

// newBenchFixtureOn is newBenchFixtureWith on the store db, which it
// closes when the benchmark ends.
func newBenchFixtureOn(b *testing.B, db *store.DB, limits *LimitsConfig) *benchFixture {
	b.Helper()
	ctx := context.Background()
	b.Cleanup(func() { db.Close() })
	sgn, err := localca.New(benchCA(b), localca.Options{Lifetime: 12 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	v, err := validate.New(validate.Config{Resolvers: []string{"127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(ctx, ProfileConfig{Profile: "bench", Limits: limits}, Options{
		DB: db, Queue: jobs.NewQueue(db, nil), Signer: sgn, Validator: v,
	})
	if err != nil {
		b.Fatal(err)
	}
	f := &benchFixture{srv: srv, db: db, base: "https://acme.bench.test" + srv.Prefix(), signer: sgn}
	return f.withAccount(b)
}

// withAccount is f signing as a new account of its own.
func (f *benchFixture) withAccount(b *testing.B) *benchFixture {
	b.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwk := &jose.JSONWebKey{Key: &key.PublicKey}
	raw, err := jwk.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	tp, err := thumbprint(jwk)
	if err != nil {
		b.Fatal(err)
	}
	acct, _, err := f.db.CreateAccount(context.Background(), store.Account{Profile: "bench", Thumbprint: tp, KeyJWK: raw}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	g := *f
	g.key, g.acct, g.kid = key, acct, f.base+"/account/"+acct.ID
	return &g
}

// benchCA is a P-256 issuing CA, as Caddy's local CA is.
func benchCA(b *testing.B) localca.Source {
	b.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "acmeproxy bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		b.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return localca.Static([]*x509.Certificate{ca}, key)
}

// signKID builds a flattened ES256 JWS signed with the account's key,
// identified by kid, as a client sends it. An empty nonce leaves the
// nonce out.
func (f *benchFixture) signKID(b *testing.B, url, nonce string, payload []byte) []byte {
	b.Helper()
	hdr := map[string]string{"alg": "ES256", "kid": f.kid, "url": url}
	if nonce != "" {
		hdr["nonce"] = nonce
	}
	h, _ := json.Marshal(hdr)
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(h) + "." + enc.EncodeToString(payload)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, f.key, sum[:])
	if err != nil {
		b.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	protected, encPayload, _ := strings.Cut(input, ".")
	body, _ := json.Marshal(map[string]string{"protected": protected, "payload": encPayload, "signature": enc.EncodeToString(sig)})
	return body
}

// BenchmarkVerifyJWS measures the verification step every signed request
// passes (parse, account lookup, ES256 signature, url) with and without
// consuming a fresh nonce, which is one write transaction in the store.
// The JWS are signed before the timer starts.
func BenchmarkVerifyJWS(b *testing.B) {
	for _, sync := range benchSyncModes {
		b.Run("kid+nonce/synchronous="+sync, func(b *testing.B) {
			f := newBenchFixture(b, sync)
			url := f.base + "/new-order"
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = f.signKID(b, url, f.srv.nonces.mint("bench", time.Now()), []byte(`{}`))
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.srv.verifyJWS(ctx, bodies[i], f.base, url, needKID, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("kid-without-nonce", func(b *testing.B) {
		f := newBenchFixture(b, "")
		url := f.base + "/new-order"
		body := f.signKID(b, url, "", []byte(`{}`))
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := f.srv.verifyJWS(ctx, body, f.base, url, needKID, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkNonce measures minting a nonce (an HMAC, no I/O) and minting
// plus consuming one (the consume is an INSERT into used_nonces, one
// commit).
func BenchmarkNonce(b *testing.B) {
	b.Run("mint", func(b *testing.B) {
		f := newBenchFixture(b, "")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = f.srv.nonces.mint("bench", time.Now())
		}
	})
	for _, sync := range benchSyncModes {
		b.Run("mint+consume/synchronous="+sync, func(b *testing.B) {
			f := newBenchFixture(b, sync)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now := time.Now()
				if err := f.srv.nonces.consume(ctx, "bench", f.srv.nonces.mint("bench", now), now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewOrder measures a new-order request through ServeHTTP, from
// the signed body to the 201: JWS verification with its nonce, policy,
// the order with one authorization and its challenges in one transaction,
// and the response with a fresh nonce.
func BenchmarkNewOrder(b *testing.B) {
	for _, sync := range benchSyncModes {
		b.Run("synchronous="+sync, func(b *testing.B) {
			f := newBenchFixture(b, sync)
			url := f.base + "/new-order"
			bodies := make([][]byte, b.N)
			for i := range bodies {
				payload := fmt.Sprintf(`{"identifiers":[{"type":"dns","value":"n%d.bench.example.com"}]}`, i)
				bodies[i] = f.signKID(b, url, f.srv.nonces.mint("bench", time.Now()), []byte(payload))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := httptest.NewRequest(http.MethodPost, url, strings.NewReader(string(bodies[i])))
				r.Header.Set("Content-Type", "application/jose+json")
				w := httptest.NewRecorder()
				f.srv.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					b.Fatalf("new-order: %d %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkFinalizeCheckAndSign measures what finalize does with the CSR
// besides the store: parse it and check it against the order (its
// signature, key, names), and sign the leaf with the local CA.
func BenchmarkFinalizeCheckAndSign(b *testing.B) {
	f := newBenchFixture(b, "")
	certKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	name := "www.bench.example.com"
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, certKey)
	if err != nil {
		b.Fatal(err)
	}
	idents := []acme.Identifier{{Type: acme.IdentifierDNS, Value: name}}
	check := func(b *testing.B) *x509.CertificateRequest {
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			b.Fatal(err)
		}
		if err := authority.CheckCSR(csr, idents, f.acct.KeyJWK); err != nil {
			b.Fatal(err)
		}
		return csr
	}
	csr := check(b)
	sign := func(b *testing.B, csr *x509.CertificateRequest) {
		out, err := f.signer.Issue(context.Background(), signer.IssueRequest{
			OrderID: "bench", Profile: "bench", CSR: csr, CSRDER: der, Identifiers: idents,
		})
		if err != nil || len(out.Chain) == 0 {
			b.Fatalf("sign: %v", err)
		}
	}
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			check(b)
		}
	})
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sign(b, csr)
		}
	})
	b.Run("check+sign", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sign(b, check(b))
		}
	})
}

// BenchmarkNewOrderLimits measures what the limits add to a new-order:
// the same request as BenchmarkNewOrder with every limit off, and with the
// default limits, which spend from the account's orders bucket and its
// pending authorizations bound and check the identifier set's duplicate
// certificates and the identifier's failed validations, in the order's
// own write.
// The orders are spread over accounts of at most 500 orders each, under
// the default orders_per_account, so that no request is refused and an
// account's pending authorizations reach half the default cap.
//
// The last variants run on PostgreSQL (internal/pgtest's server), the
// limits' buckets shared by every instance on it.
func BenchmarkNewOrderLimits(b *testing.B) {
	const perAccount = 500
	stores := []string{"postgres"}
	for _, sync := range benchSyncModes {
		stores = append([]string{"synchronous=" + sync}, stores...)
	}
	for _, where := range stores {
		for _, lim := range []struct {
			name   string
			limits *LimitsConfig
		}{{"off", everyLimitOff()}, {"default", nil}} {
			b.Run("limits="+lim.name+"/"+where, func(b *testing.B) {
				var f *benchFixture
				if sync, ok := strings.CutPrefix(where, "synchronous="); ok {
					f = newBenchFixtureWith(b, sync, lim.limits)
				} else {
					db, err := store.OpenPostgres(context.Background(), pgtest.DSN(b), store.PostgresOptions{})
					if err != nil {
						b.Fatal(err)
					}
					f = newBenchFixtureOn(b, db, lim.limits)
				}
				url := f.base + "/new-order"
				f, bodies := f.newOrderBodies(b, b.N, perAccount)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := proccpu.Used()
				for i := 0; i < b.N; i++ {
					r := httptest.NewRequest(http.MethodPost, url, strings.NewReader(string(bodies[i])))
					r.Header.Set("Content-Type", "application/jose+json")
					w := httptest.NewRecorder()
					f.srv.ServeHTTP(w, r)
					if w.Code != http.StatusCreated {
						b.Fatalf("new-order %d: %d %s", i, w.Code, w.Body)
					}
				}
				reportCPU(b, cpu)
			})
		}
	}
}

// newOrderBodies signs n new-orders of one name each, perAccount to an
// account (f's, then new ones), and returns the fixture of the last.
func (f *benchFixture) newOrderBodies(b *testing.B, n, perAccount int) (*benchFixture, [][]byte) {
	b.Helper()
	url := f.base + "/new-order"
	bodies := make([][]byte, n)
	for i := range bodies {
		if i > 0 && i%perAccount == 0 {
			f = f.withAccount(b)
		}
		payload := fmt.Sprintf(`{"identifiers":[{"type":"dns","value":"n%d.bench.example.com"}]}`, i)
		bodies[i] = f.signKID(b, url, f.srv.nonces.mint("bench", time.Now()), []byte(payload))
	}
	return f, bodies
}

// BenchmarkNewOrderRequests is BenchmarkNewOrderLimits/limits=off's
// preparation alone: the same fixture and the same signed requests, none
// of them served. Instruction counts of a whole run (callgrind) count
// that client-side work too; this is what to subtract from them for the
// server's share.
func BenchmarkNewOrderRequests(b *testing.B) {
	f := newBenchFixtureWith(b, "FULL", everyLimitOff())
	_, bodies := f.newOrderBodies(b, b.N, 500)
	if len(bodies) != b.N {
		b.Fatalf("%d requests signed; want %d", len(bodies), b.N)
	}
}

// BenchmarkOrderLimits measures the limit check of a new-order below the
// HTTP front: the authority's CreateOrder of a one-name order with every
// limit off, and with the default limits (OrderLimits' count of the
// account's pending authorizations, then the spend inside the order's own
// write), for an account with no other pending authorization and for one
// with 500 (half the default cap).
func BenchmarkOrderLimits(b *testing.B) {
	for _, pending := range []int{0, 500} {
		for _, on := range []bool{false, true} {
			name := fmt.Sprintf("pending=%d/limits=off", pending)
			if on {
				name = fmt.Sprintf("pending=%d/limits=default", pending)
			}
			b.Run(name, func(b *testing.B) {
				f := newBenchFixtureWith(b, "FULL", nil)
				ctx := context.Background()
				au := f.srv.Authority()
				for i := range pending {
					ids := []acme.Identifier{{Type: acme.IdentifierDNS, Value: fmt.Sprintf("p%d.bench.example.com", i)}}
					if _, err := au.CreateOrder(ctx, f.acct.ID, ids, []bool{false}, time.Time{}, time.Time{}, "", nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := proccpu.Used()
				for i := 0; i < b.N; i++ {
					if i > 0 && i%500 == 0 { // under the default orders_per_account
						b.StopTimer()
						f = f.withAccount(b)
						b.StartTimer()
					}
					ids := []acme.Identifier{{Type: acme.IdentifierDNS, Value: fmt.Sprintf("n%d.bench.example.com", i)}}
					var lim *authority.OrderLimits
					if on {
						var err error
						if lim, err = au.OrderLimits(ctx, f.acct, ids, []bool{false}, false, authority.Client{}); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := au.CreateOrder(ctx, f.acct.ID, ids, []bool{false}, time.Time{}, time.Time{}, "", nil, lim); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu)
			})
		}
	}
}

// reportCPU reports the process's CPU time per operation since start
// (cpu-ns/op): unlike ns/op, it hardly moves when other processes load
// the machine, so two variants compare on a busy host too. It leaves out
// the time spent waiting on fsync, which ns/op includes.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(proccpu.Used()-start)/float64(b.N), "cpu-ns/op")
}
