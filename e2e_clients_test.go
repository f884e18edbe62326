package caddyacmeproxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
	"log/slog"
	"strconv"
	"testing"
	"time"

	legoacme "github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/dns01"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/challenge/tlsalpn01"
	"github.com/go-acme/lego/v5/lego"
	legolog "github.com/go-acme/lego/v5/log"
	"github.com/go-acme/lego/v5/registration"
	"github.com/mholt/acmez/v3"
	acmezacme "github.com/mholt/acmez/v3/acme"
	xacme "golang.org/x/crypto/acme"
)

// ---- lego ----

func TestLegoObtainsACertificateWithEachChallengeType(t *testing.T) {
	env := newE2EEnv(t)
	httpPort, tlsPort := freePort(t), freePort(t)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: tlsPort})
	useE2ELegoDNS(t, env.DNSAddr)

	solveHTTP01 := func(c *lego.Client) error {
		return c.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort)))
	}
	tests := []struct {
		name    string
		domains []string
		solve   func(c *lego.Client) error
	}{
		{
			name:    "http-01 for two names",
			domains: []string{"lego-http.example.com", "www.lego-http.example.com"},
			solve:   solveHTTP01,
		},
		{
			name:    "dns-01 for a wildcard and its base name",
			domains: []string{"w.example.com", "*.w.example.com"},
			solve: func(c *lego.Client) error {
				return c.Challenge.SetDNS01Provider(e2eLegoDNS{env.dns},
					dns01.DisableAuthoritativeNssPropagationRequirement(), dns01.PropagationWait(0, true))
			},
		},
		{
			name:    "tls-alpn-01",
			domains: []string{"lego-alpn.example.com"},
			solve: func(c *lego.Client) error {
				return c.Challenge.SetTLSALPN01Provider(tlsalpn01.NewProviderServer("127.0.0.1", strconv.Itoa(tlsPort)))
			},
		},
		{
			name:    "http-01 for the IP address 127.0.0.1",
			domains: []string{"127.0.0.1"},
			solve:   solveHTTP01,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			client := newE2ELego(t, env)
			if err := tt.solve(client); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
			defer cancel()
			res, err := client.Certificate.Obtain(ctx, certificate.ObtainRequest{
				Domains: tt.domains, Bundle: true, KeyType: certcrypto.EC256,
			})
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			env.checkIssued(t, e2ePEMChain(t, res.Certificate), tt.domains...)
			t.Logf("issued in %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// e2eLegoUser is a lego registration.User with a fresh P-256 account key.
type e2eLegoUser struct {
	key crypto.Signer
	reg *legoacme.ExtendedAccount
}

func (u *e2eLegoUser) GetEmail() string                           { return "" }
func (u *e2eLegoUser) GetRegistration() *legoacme.ExtendedAccount { return u.reg }
func (u *e2eLegoUser) GetPrivateKey() crypto.Signer               { return u.key }

// newE2ELego returns a lego client with a new account registered at the
// proxy's e2e profile.
func newE2ELego(t *testing.T, env *e2eEnv) *lego.Client {
	t.Helper()
	user := &e2eLegoUser{key: e2eP256Key(t)}
	cfg := lego.NewConfig(user)
	cfg.CADirURL = env.directoryURL(e2eProfile)
	cfg.HTTPClient = env.client
	cfg.UserAgent = "caddy-acme-proxy-e2e"
	client, err := lego.NewClient(cfg)
	if err != nil {
		t.Fatalf("lego.NewClient: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	if user.reg, err = client.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return client
}

// e2eLegoDNS answers dns-01 by writing the TXT record into the test's
// DNS server.
type e2eLegoDNS struct{ dns *testdns.Server }

func (p e2eLegoDNS) Present(ctx context.Context, domain, _, keyAuth string) error {
	info := dns01.GetChallengeInfo(ctx, domain, keyAuth)
	p.dns.AddTXT(info.EffectiveFQDN, info.Value)
	return nil
}

func (p e2eLegoDNS) CleanUp(ctx context.Context, domain, _, keyAuth string) error {
	info := dns01.GetChallengeInfo(ctx, domain, keyAuth)
	p.dns.DeleteTXT(info.EffectiveFQDN, info.Value)
	return nil
}

// Timeout keeps lego from sleeping its default 2s polling interval before
// it answers the challenge: the record is there at once.
func (e2eLegoDNS) Timeout() (timeout, interval time.Duration) {
	return e2eWait, 10 * time.Millisecond
}

// useE2ELegoDNS points lego's DNS lookups (CNAME following of dns-01) at the
// test's DNS server for the rest of the test.
func useE2ELegoDNS(t *testing.T, addr string) {
	prev := dns01.DefaultClient()
	dns01.SetDefaultClient(dns01.NewClient(&dns01.Options{RecursiveNameservers: []string{addr}, Timeout: 2 * time.Second}))
	t.Cleanup(func() { dns01.SetDefaultClient(prev) })
}

// quietE2ELego sends lego's log to the test's output for the rest of the
// test, instead of stdout.
func quietE2ELego(t *testing.T) {
	prev := legolog.Default()
	legolog.SetDefault(slog.New(e2eLogHandler(t, slog.LevelInfo)))
	t.Cleanup(func() { legolog.SetDefault(prev) })
}

// ---- golang.org/x/crypto/acme ----

func TestXCryptoACMEObtainsACertificateWithHTTP01(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	env.load(t, e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t)})

	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, env)
	names := []string{"xcrypto.example.com", "www.xcrypto.example.com"}
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(names...))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	for _, u := range order.AuthzURLs {
		e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, u))
	}
	chain := e2eFinishOrder(ctx, t, c, order, names)
	env.checkIssued(t, chain, names...)
	t.Logf("issued in %s", time.Since(start).Round(time.Millisecond))
}

// x/crypto/acme rolls its account over to a new key (RFC 8555 §7.3.5,
// AccountKeyRollover): the account then issues with the new key, and the
// old key no longer names any account.
func TestXCryptoACMERollsItsAccountKeyOverAndIssuesWithTheNewOne(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	env.load(t, e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t)})

	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, env)
	before, err := c.GetReg(ctx, "")
	if err != nil {
		t.Fatalf("GetReg: %v", err)
	}
	oldKey := c.Key
	if err := c.AccountKeyRollover(ctx, e2eP256Key(t)); err != nil {
		t.Fatalf("AccountKeyRollover: %v", err)
	}
	after, err := c.GetReg(ctx, "")
	if err != nil || after.URI != before.URI {
		t.Fatalf("the account under the new key: %+v (%v); want %s", after, err, before.URI)
	}

	names := []string{"rollover.example.com"}
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(names...))
	if err != nil {
		t.Fatalf("AuthorizeOrder with the new key: %v", err)
	}
	for _, u := range order.AuthzURLs {
		e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, u))
	}
	env.checkIssued(t, e2eFinishOrder(ctx, t, c, order, names), names...)

	old := &xacme.Client{Key: oldKey, HTTPClient: env.client, DirectoryURL: env.directoryURL(e2eProfile), UserAgent: "caddy-acme-proxy-e2e"}
	if acct, err := old.GetReg(ctx, ""); !errors.Is(err, xacme.ErrNoAccount) {
		t.Errorf("the old key after the rollover: account %+v, %v; want ErrNoAccount", acct, err)
	}
}

// newE2EXCrypto returns an x/crypto/acme client with a new account
// registered at the proxy's e2e profile.
func newE2EXCrypto(ctx context.Context, t *testing.T, env *e2eEnv) *xacme.Client {
	t.Helper()
	c := &xacme.Client{
		Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(e2eProfile),
		UserAgent: "caddy-acme-proxy-e2e",
	}
	if _, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return c
}

// e2ePendingHTTP01 reads an authorization, puts the key authorization of
// its http-01 challenge on srv and returns the challenge (not yet
// answered).
func e2ePendingHTTP01(ctx context.Context, t *testing.T, c *xacme.Client, srv *e2eHTTP01Server, authzURL string) *xacme.Challenge {
	t.Helper()
	z, err := c.GetAuthorization(ctx, authzURL)
	if err != nil {
		t.Fatalf("GetAuthorization: %v", err)
	}
	if z.Status != xacme.StatusPending {
		t.Fatalf("authorization %s for %s is %s, want pending", authzURL, z.Identifier.Value, z.Status)
	}
	for _, ch := range z.Challenges {
		if ch.Type == "http-01" {
			keyAuth, err := c.HTTP01ChallengeResponse(ch.Token)
			if err != nil {
				t.Fatal(err)
			}
			srv.set(ch.Token, keyAuth)
			return ch
		}
	}
	t.Fatalf("authorization %s for %s offers no http-01 challenge", authzURL, z.Identifier.Value)
	return nil
}

// e2eAuthorizedOrder registers c, orders name, has the order's http-01
// challenge met through srv and waits for its authorization: the order
// is ready to finalize with a CSR for name.
func e2eAuthorizedOrder(ctx context.Context, t *testing.T, c *xacme.Client, srv *e2eHTTP01Server, name string) *xacme.Order {
	t.Helper()
	if _, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS); err != nil {
		t.Fatalf("Register: %v", err)
	}
	o, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(name))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, o.AuthzURLs[0]))
	if _, err := c.WaitAuthorization(ctx, o.AuthzURLs[0]); err != nil {
		t.Fatalf("WaitAuthorization: %v", err)
	}
	return o
}

// e2eAccept tells the server to validate the challenge.
func e2eAccept(ctx context.Context, t *testing.T, c *xacme.Client, ch *xacme.Challenge) {
	t.Helper()
	if _, err := c.Accept(ctx, ch); err != nil {
		t.Fatalf("Accept %s: %v", ch.URI, err)
	}
}

// e2eFinishOrder waits for the order's authorizations and the order
// itself, finalizes it with a CSR for names and returns the chain.
func e2eFinishOrder(ctx context.Context, t *testing.T, c *xacme.Client, order *xacme.Order, names []string) [][]byte {
	t.Helper()
	for _, u := range order.AuthzURLs {
		if _, err := c.WaitAuthorization(ctx, u); err != nil {
			t.Fatalf("WaitAuthorization %s: %v", u, err)
		}
	}
	order, err := c.WaitOrder(ctx, order.URI)
	if err != nil {
		t.Fatalf("WaitOrder: %v", err)
	}
	if order.Status != xacme.StatusReady {
		t.Fatalf("order %s is %s, want ready", order.URI, order.Status)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, e2eP256Key(t))
	if err != nil {
		t.Fatal(err)
	}
	chain, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csr, true)
	if err != nil {
		t.Fatalf("CreateOrderCert: %v", err)
	}
	return chain
}

// ---- acmez ----

func TestAcmezObtainsACertificateForANameAndAnAddressWithHTTP01(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	env.load(t, e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t)})

	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	client := acmez.Client{
		Client: &acmezacme.Client{
			Directory:  env.directoryURL(e2eProfile),
			HTTPClient: env.client,
			UserAgent:  "caddy-acme-proxy-e2e",
			Logger:     slog.New(e2eLogHandler(t, slog.LevelInfo)),
		},
		ChallengeSolvers: map[string]acmez.Solver{acmezacme.ChallengeTypeHTTP01: e2eAcmezHTTP01{srv}},
	}
	acct, err := client.NewAccount(ctx, acmezacme.Account{TermsOfServiceAgreed: true, PrivateKey: e2eP256Key(t)})
	if err != nil {
		t.Fatalf("NewAccount: %v", err)
	}
	names := []string{"acmez.example.com", "127.0.0.1"}
	certs, err := client.ObtainCertificateForSANs(ctx, acct, e2eP256Key(t), names)
	if err != nil {
		t.Fatalf("ObtainCertificateForSANs: %v", err)
	}
	if len(certs) == 0 {
		t.Fatal("no certificate chain")
	}
	env.checkIssued(t, e2ePEMChain(t, certs[0].ChainPEM), names...)
	t.Logf("issued in %s", time.Since(start).Round(time.Millisecond))
}

// e2eAcmezHTTP01 answers http-01 for acmez on the test's challenge server.
type e2eAcmezHTTP01 struct{ srv *e2eHTTP01Server }

func (s e2eAcmezHTTP01) Present(_ context.Context, ch acmezacme.Challenge) error {
	s.srv.set(ch.Token, ch.KeyAuthorization)
	return nil
}

func (s e2eAcmezHTTP01) CleanUp(_ context.Context, ch acmezacme.Challenge) error {
	s.srv.delete(ch.Token)
	return nil
}

// ---- keys ----

func e2eP256Key(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
