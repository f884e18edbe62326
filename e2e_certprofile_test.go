package caddyacmeproxy

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
)

// e2eCertProfile is the profile of the certificate profile tests: a
// default "tls" certificate profile for servers and an "mtls" one for
// clients (client_auth only, EC P-256 keys, no common name, 6 hours).
const e2eCertProfile = "cp"

func e2eCertProfiles(dnsAddr string, httpPort, tlsPort int) string {
	return fmt.Sprintf(`
	acme_proxy {
		profile %s
		resolvers %s
		validation_ports {
			http %d
			tls %d
		}
		certificate_profile tls {
			description "TLS servers"
			lifetime 48h
			key_types ec256 rsa2048
			max_identifiers 2
		}
		certificate_profile mtls {
			description "mTLS clients"
			lifetime 6h
			ext_key_usage client_auth
			key_types ec256
			common_name off
		}
		default_certificate_profile tls
	}
`, e2eCertProfile, dnsAddr, httpPort, tlsPort)
}

// checkProfileLeaf checks a leaf of a certificate profile: it chains to
// Caddy's local root for the usage eku, has exactly that extended key
// usage, the common name wantCN, a validity of lifetime (less the minute
// it is backdated by, at most), and passes zlint.
func (env *e2eEnv) checkProfileLeaf(t *testing.T, chain [][]byte, eku x509.ExtKeyUsage, wantCN string, lifetime time.Duration) {
	t.Helper()
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		t.Fatal(err)
	}
	inters := x509.NewCertPool()
	for _, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inters.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: env.rootPool, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{eku}}); err != nil {
		t.Errorf("the leaf does not chain to Caddy's local root for %v: %v", eku, err)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{eku}) || len(leaf.UnknownExtKeyUsage) > 0 {
		t.Errorf("ExtKeyUsage = %v %v, want %v only", leaf.ExtKeyUsage, leaf.UnknownExtKeyUsage, eku)
	}
	if leaf.Subject.CommonName != wantCN {
		t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, wantCN)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore) + time.Second; got > lifetime || got < lifetime-time.Minute {
		t.Errorf("validity %v, want %v", got, lifetime)
	}
	lintcheck.PrivateLeaf(t, chain[0])
}

func TestLegoObtainsACertificateOfEachCertificateProfileAndIsRefusedOutsideThem(t *testing.T) {
	env := newE2EEnv(t)
	httpPort := freePort(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t),
		ExtraProfiles: e2eCertProfiles(env.DNSAddr, httpPort, freePort(t))})

	tests := []struct {
		name     string
		profile  string
		domains  []string
		key      certcrypto.KeyType
		eku      x509.ExtKeyUsage
		cn       bool
		lifetime time.Duration
		wantErr  string // a problem type
	}{
		{name: "ok/mtls: clientAuth only, no common name, 6 hours", profile: "mtls", domains: []string{"client.example.com"},
			key: certcrypto.EC256, eku: x509.ExtKeyUsageClientAuth, lifetime: 6 * time.Hour},
		{name: "ok/tls: serverAuth, a common name, 48 hours", profile: "tls", domains: []string{"tls.example.com"},
			key: certcrypto.RSA2048, eku: x509.ExtKeyUsageServerAuth, cn: true, lifetime: 48 * time.Hour},
		{name: "ok/no profile asked for: the default, tls", domains: []string{"default.example.com", "www.default.example.com"},
			key: certcrypto.EC256, eku: x509.ExtKeyUsageServerAuth, cn: true, lifetime: 48 * time.Hour},
		{name: "fail/an unknown profile", profile: "nope", domains: []string{"nope.example.com"}, key: certcrypto.EC256,
			wantErr: "urn:ietf:params:acme:error:invalidProfile"},
		{name: "fail/mtls refuses an RSA key at finalize", profile: "mtls", domains: []string{"rsa.example.com"}, key: certcrypto.RSA2048,
			wantErr: "urn:ietf:params:acme:error:badCSR"},
		{name: "fail/tls asked for with three names is invalidProfile at new-order", profile: "tls", domains: []string{"a.example.com", "b.example.com", "c.example.com"},
			key: certcrypto.EC256, wantErr: "urn:ietf:params:acme:error:invalidProfile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newE2ELegoAt(t, env, e2eCertProfile)
			if err := client.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
			defer cancel()
			res, err := client.Certificate.Obtain(ctx, certificate.ObtainRequest{
				Domains: tt.domains, Bundle: true, KeyType: tt.key, Profile: tt.profile,
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Obtain: %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			cn := ""
			if tt.cn {
				cn = tt.domains[0]
			}
			env.checkProfileLeaf(t, e2ePEMChain(t, res.Certificate), tt.eku, cn, tt.lifetime)
		})
	}
}

// newE2ELegoAt is newE2ELego at another profile of the proxy.
func newE2ELegoAt(t *testing.T, env *e2eEnv, profile string) *lego.Client {
	t.Helper()
	user := &e2eLegoUser{key: e2eP256Key(t)}
	cfg := lego.NewConfig(user)
	cfg.CADirURL = env.directoryURL(profile)
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

func TestXCryptoACMESeesTheCertificateProfilesAndObtainsAClientCertificate(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t),
		ExtraProfiles: e2eCertProfiles(env.DNSAddr, e2ePort(ln), freePort(t))})

	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(e2eCertProfile), UserAgent: "caddy-acme-proxy-e2e"}
	if _, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS); err != nil {
		t.Fatalf("Register: %v", err)
	}
	dir, err := c.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[xacme.ProfileName]string{"tls": "TLS servers", "mtls": "mTLS clients"}
	if len(dir.Profiles) != len(want) || dir.Profiles["tls"] != want["tls"] || dir.Profiles["mtls"] != want["mtls"] {
		t.Errorf("directory profiles = %v, want %v", dir.Profiles, want)
	}
	names := []string{"xclient.example.com"}
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(names...), xacme.WithOrderIssuanceProfile("mtls"))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	if order.Profile != "mtls" {
		t.Errorf("order profile = %q, want mtls", order.Profile)
	}
	for _, u := range order.AuthzURLs {
		e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, u))
	}
	for _, u := range order.AuthzURLs {
		if _, err := c.WaitAuthorization(ctx, u); err != nil {
			t.Fatalf("WaitAuthorization: %v", err)
		}
	}
	if order, err = c.WaitOrder(ctx, order.URI); err != nil {
		t.Fatalf("WaitOrder: %v", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, e2eP256Key(t))
	if err != nil {
		t.Fatal(err)
	}
	chain, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csr, true)
	if err != nil {
		t.Fatalf("CreateOrderCert: %v", err)
	}
	env.checkProfileLeaf(t, chain, x509.ExtKeyUsageClientAuth, "", 6*time.Hour)
}
