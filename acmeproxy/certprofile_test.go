package acmeproxy

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
)

func off() *bool { f := false; return &f }

// certProfiles is a profile's certificate profiles for these tests: a
// default server one, a client one with only client_auth, an hour's
// lifetime, EC keys only and no common name, and one allowing one name.
func certProfiles(c *ProfileConfig) {
	c.CertificateProfiles = map[string]*CertificateProfileConfig{
		"server": {Description: "TLS servers"},
		"client": {Description: "mTLS clients", Lifetime: Duration(time.Hour), ExtKeyUsage: []string{"client_auth"},
			KeyTypes: []string{"ec256", "ec384"}, CommonName: off()},
		"single": {Description: "one name", MaxIdentifiers: 1},
	}
	c.DefaultCertificateProfile = "server"
}

func TestTheDirectoryListsTheCertificateProfilesWithTheirDescriptions(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ProfileConfig)
		want   map[string]string
	}{
		{"ok/every configured profile with its description", certProfiles,
			map[string]string{"server": "TLS servers", "client": "mTLS clients", "single": "one name"}},
		{"ok/none configured, no profiles member", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, tc.mutate)
			r := e.plain(http.MethodGet, e.dirURL)
			var dir struct {
				Meta map[string]json.RawMessage `json:"meta"`
			}
			if err := json.Unmarshal(r.body, &dir); err != nil {
				t.Fatal(err)
			}
			raw, ok := dir.Meta["profiles"]
			if tc.want == nil {
				if ok {
					t.Fatalf("meta.profiles = %s, want absent", raw)
				}
				return
			}
			var got map[string]string
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("meta.profiles %s: %v", raw, err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("meta.profiles = %v, want %v", got, tc.want)
			}
		})
	}
}

// singleByDefault is certProfiles with the one-name profile the default.
func singleByDefault(c *ProfileConfig) {
	certProfiles(c)
	c.DefaultCertificateProfile = "single"
}

func TestANewOrderTakesAnOfferedCertificateProfileAndRefusesOthers(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(*ProfileConfig)
		profile  string // "" sends none
		names    []string
		want     string // the order's profile
		wantType acme.ProblemType
	}{
		{name: "ok/a named profile is echoed", mutate: certProfiles, profile: "client", names: []string{"a.example.com"}, want: "client"},
		{name: "ok/no profile asked for gets the default", mutate: certProfiles, names: []string{"a.example.com"}, want: "server"},
		{name: "ok/max_identifiers counts distinct identifiers", mutate: certProfiles, profile: "single",
			names: []string{"a.example.com", "A.example.com"}, want: "single"},
		{name: "ok/no profiles configured and none asked for: none", names: []string{"a.example.com"}},
		{name: "fail/an unknown profile is invalidProfile", mutate: certProfiles, profile: "nope", names: []string{"a.example.com"},
			wantType: acme.ErrorInvalidProfile},
		{name: "fail/a profile where none is offered is invalidProfile", profile: "server", names: []string{"a.example.com"},
			wantType: acme.ErrorInvalidProfile},
		{name: "fail/more identifiers than the named profile's max_identifiers are invalidProfile", mutate: certProfiles, profile: "single",
			names: []string{"a.example.com", "b.example.com"}, wantType: acme.ErrorInvalidProfile},
		{name: "fail/more identifiers than the default profile's max_identifiers are rejectedIdentifier", mutate: singleByDefault,
			names: []string{"a.example.com", "b.example.com"}, wantType: acme.ErrorRejectedIdentifier},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, tc.mutate)
			c := e.rawClient()
			c.register()
			var ids []map[string]string
			for _, n := range tc.names {
				ids = append(ids, dnsID(n))
			}
			p := map[string]any{"identifiers": ids}
			if tc.profile != "" {
				p["profile"] = tc.profile
			}
			r := c.post(e.url("/new-order"), p, jwsOpts{})
			if tc.wantType != "" {
				wantProblem(t, r, http.StatusBadRequest, tc.wantType)
				return
			}
			if r.status != http.StatusCreated {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := decodeAs[orderJSON](t, r).Profile; got != tc.want {
				t.Errorf("order's profile = %q, want %q", got, tc.want)
			}
			if got := decodeAs[orderJSON](t, c.read(r.header.Get("Location"))).Profile; got != tc.want {
				t.Errorf("order read back has profile %q, want %q", got, tc.want)
			}
			if tc.want == "" && strings.Contains(string(r.body), `"profile"`) {
				t.Errorf("order without a profile shows one: %s", r.body)
			}
		})
	}
}

func TestFinalizeAppliesTheOrdersCertificateProfile(t *testing.T) {
	e := newTestEnv(t, certProfiles)
	c := e.rawClient()
	c.register()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		profile  string
		key      bool // RSA instead of P-256
		wantEKU  []x509.ExtKeyUsage
		wantCN   string
		wantLife time.Duration // at most
		wantType acme.ProblemType
	}{
		{name: "ok/the default: serverAuth, a common name, the signer's lifetime", wantEKU: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			wantCN: "f.example.com", wantLife: 24 * time.Hour},
		{name: "ok/client: clientAuth only, no common name, an hour", profile: "client", wantEKU: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			wantLife: time.Hour},
		{name: "fail/client refuses an RSA key as badCSR", profile: "client", key: true, wantType: acme.ErrorBadCSR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := map[string]any{"identifiers": []map[string]string{dnsID("f.example.com")}}
			if tc.profile != "" {
				p["profile"] = tc.profile
			}
			r := c.post(e.url("/new-order"), p, jwsOpts{})
			if r.status != http.StatusCreated {
				t.Fatalf("new-order: %d %s", r.status, r.body)
			}
			o := createdOrder{url: r.header.Get("Location"), orderJSON: decodeAs[orderJSON](t, r)}
			for _, az := range o.Authorizations {
				c.answerHTTP01(az, "")
				c.await(az, "valid")
			}
			c.await(o.url, "ready")
			var csr []byte
			if tc.key {
				csr = newCSR(t, rsaKey, "", []string{"f.example.com"}, nil)
			} else {
				csr = newCSR(t, newKey(t), "", []string{"f.example.com"}, nil)
			}
			fr := c.finalize(o, csr)
			if tc.wantType != "" {
				wantProblem(t, fr, http.StatusBadRequest, tc.wantType)
				if st := decodeAs[orderJSON](t, c.read(o.url)).Status; st != acme.StatusReady {
					t.Errorf("order is %s after a refused CSR, want ready (a client may send another)", st)
				}
				return
			}
			if fr.status != http.StatusOK {
				t.Fatalf("finalize: %d %s", fr.status, fr.body)
			}
			done := decodeAs[orderJSON](t, c.await(o.url, "valid"))
			block, _ := pem.Decode(c.read(done.Certificate).body)
			if block == nil {
				t.Fatal("no certificate PEM")
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			lintcheck.PrivateLeaf(t, leaf.Raw)
			if !slices.Equal(leaf.ExtKeyUsage, tc.wantEKU) || len(leaf.UnknownExtKeyUsage) > 0 {
				t.Errorf("EKU = %v, want %v", leaf.ExtKeyUsage, tc.wantEKU)
			}
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, tc.wantCN)
			}
			if life := leaf.NotAfter.Sub(leaf.NotBefore) + time.Second; life > tc.wantLife || life < tc.wantLife-time.Minute {
				t.Errorf("lifetime = %v, want %v", life, tc.wantLife)
			}
		})
	}
}

// A reload may drop a certificate profile that orders already chose: they
// are not issued by whatever the profile has become.
func TestFinalizeRefusesAnOrderWhoseCertificateProfileIsNoLongerOffered(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "acme.db")
	before := newTestEnvWith(t, envOptions{dbPath: dbPath, mutate: certProfiles})
	c := before.rawClient()
	c.register()
	r := c.post(before.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("g.example.com")}, "profile": "client"}, jwsOpts{})
	if r.status != http.StatusCreated {
		t.Fatalf("new-order: %d %s", r.status, r.body)
	}
	o := createdOrder{url: r.header.Get("Location"), orderJSON: decodeAs[orderJSON](t, r)}
	for _, az := range o.Authorizations {
		c.answerHTTP01(az, "")
		c.await(az, "valid")
	}
	c.await(o.url, "ready")

	after := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: before.ca, mutate: func(cfg *ProfileConfig) {
		certProfiles(cfg)
		delete(cfg.CertificateProfiles, "client")
	}})
	c2 := &rawClient{t: t, e: after, key: c.key, kid: strings.Replace(c.kid, before.ts.URL, after.ts.URL, 1)}
	o.url = strings.Replace(o.url, before.ts.URL, after.ts.URL, 1)
	o.Finalize = strings.Replace(o.Finalize, before.ts.URL, after.ts.URL, 1)
	wantProblem(t, c2.finalize(o, newCSR(t, newKey(t), "", []string{"g.example.com"}, nil)), http.StatusBadRequest, acme.ErrorInvalidProfile)
}

func TestACertificateProfileConfigErrorNamesItsKey(t *testing.T) {
	tests := []struct {
		name    string
		cp      *CertificateProfileConfig
		dflt    string
		wantErr string
	}{
		{"ok/a full profile", &CertificateProfileConfig{Lifetime: Duration(time.Hour), ExtKeyUsage: []string{"server_auth", "client_auth"},
			KeyTypes: []string{"ec256", "rsa2048", "ed25519"}, MaxIdentifiers: 3}, "x", ""},
		{"fail/an unknown ext_key_usage", &CertificateProfileConfig{ExtKeyUsage: []string{"code_signing"}}, "",
			`certificate_profiles.x.ext_key_usage: unknown extended key usage "code_signing"`},
		{"fail/a bad key type", &CertificateProfileConfig{KeyTypes: []string{"ec521"}}, "",
			`certificate_profiles.x.key_types: unknown key type "ec521"`},
		{"fail/a negative lifetime", &CertificateProfileConfig{Lifetime: Duration(-time.Hour)}, "",
			`certificate_profiles.x.lifetime: must be positive`},
		{"fail/a negative max_identifiers", &CertificateProfileConfig{MaxIdentifiers: -1}, "",
			`certificate_profiles.x.max_identifiers: must be positive`},
		{"ok/an upstream profile", &CertificateProfileConfig{UpstreamProfile: "shortlived"}, "", ""},
		{"fail/an upstream profile with a space", &CertificateProfileConfig{UpstreamProfile: "short lived"}, "",
			`certificate_profiles.x.upstream_profile: "short lived" is not a profile name`},
		{"fail/a null profile", nil, "", `certificate_profiles.x: is null`},
		{"fail/a default naming an unknown profile", &CertificateProfileConfig{}, "y",
			`default_certificate_profile: "y" is not a configured certificate profile`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ProfileConfig{Profile: "p", CertificateProfiles: map[string]*CertificateProfileConfig{"x": tc.cp}, DefaultCertificateProfile: tc.dflt}
			cfg.SetDefaults()
			err := cfg.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestACertificateProfileLifetimeReadsCaddysDurations(t *testing.T) {
	tests := []struct {
		name string
		json string
		want time.Duration
		ok   bool
	}{
		{"ok/hours", `"24h"`, 24 * time.Hour, true},
		{"ok/days", `"30d"`, 30 * 24 * time.Hour, true},
		{"ok/nanoseconds, as caddy.Duration writes", `3600000000000`, time.Hour, true},
		{"fail/no unit", `"30"`, 0, false},
		{"fail/fractional days", `"1.5d"`, 0, false},
		{"fail/a boolean", `true`, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d Duration
			err := json.Unmarshal([]byte(tc.json), &d)
			if (err == nil) != tc.ok {
				t.Fatalf("Unmarshal(%s) = %v, want ok=%v", tc.json, err, tc.ok)
			}
			if tc.ok && time.Duration(d) != tc.want {
				t.Errorf("Unmarshal(%s) = %v, want %v", tc.json, time.Duration(d), tc.want)
			}
		})
	}
}

// A certificate profile's lifetime that reads is written as a string that
// reads back to the same duration, so `caddy adapt` output loads; and one
// written without a minus sign never reads as negative (no overflow).
func FuzzCertificateProfileLifetime(f *testing.F) {
	for _, s := range []string{`"24h"`, `"30d"`, `"1h30m"`, `3600000000000`, `"-5s"`, `"9999999d"`, `"1.5d"`, `null`, `"d"`, `-1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			return
		}
		var str string
		if json.Unmarshal([]byte(in), &str) == nil && !strings.HasPrefix(str, "-") && d < 0 {
			t.Fatalf("%s read as the negative %v", in, time.Duration(d))
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", time.Duration(d), err)
		}
		var back Duration
		if err := json.Unmarshal(out, &back); err != nil || back != d {
			t.Fatalf("%s read as %v, written as %s, read back as %v (%v)", in, time.Duration(d), out, time.Duration(back), err)
		}
	})
}
