package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	xacme "golang.org/x/crypto/acme"
)

func TestCaddyAsAnACMEClientObtainsItsSiteCertificateFromTheProxy(t *testing.T) {
	env := newE2EEnv(t)
	env.createLocalCA(t)
	const name = "b.example.com"
	const body = "hello from b.example.com"
	// The proxy validates http-01 on Caddy's own HTTP port, where Caddy
	// answers the challenges of its ACME issuer; tls-alpn-01 is turned off
	// in the issuer so that this is the path taken.
	env.load(t, e2eConfig{
		ValidationHTTP: env.HTTPPort,
		ValidationTLS:  env.HTTPSPort,
		ExtraSites: fmt.Sprintf(`
https://%s {
	tls {
		issuer acme {
			dir %s
			trusted_roots %s
			disable_tlsalpn_challenge
			alt_http_port %d
		}
	}
	respond %q
}
`, name, env.directoryURL(e2eProfile), env.rootFile, env.HTTPPort, body),
	})

	start := time.Now()
	env.servedByProxy(t, name)
	t.Logf("Caddy obtained and served the certificate in %s", time.Since(start).Round(time.Millisecond))

	// The site answers over that certificate.
	addr := fmt.Sprintf("127.0.0.1:%d", env.HTTPSPort)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: env.rootPool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + name + "/")
	if err != nil {
		t.Fatalf("GET https://%s/: %v", name, err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(got) != body {
		t.Errorf("GET https://%s/: status %d, body %q, error %v; want 200 %q", name, resp.StatusCode, got, err, body)
	}
}

// e2eHandshake completes a TLS handshake with addr and returns its state.
func e2eHandshake(ctx context.Context, addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d := &tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState(), nil
}

func TestAConfigReloadLosesNoOrderInFlight(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	cfg := e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t)}
	env.load(t, cfg)

	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, env)

	// Each order has two names; answer says when each authorization's
	// challenge is answered relative to the reload. Every order is
	// finalized after it.
	type flight struct {
		name     string
		answer   [2]string // "before" or "after"
		ready    bool      // wait for the order to be ready before the reload
		held     bool      // hold the first validation's request until the new config serves
		names    []string
		order    *xacme.Order
		pending  [2]*xacme.Challenge
		answered [2]bool
	}
	flights := []*flight{
		{name: "ready before the reload", answer: [2]string{"before", "before"}, ready: true},
		{name: "answered just before the reload", answer: [2]string{"before", "before"}},
		{name: "validating while the reload runs", answer: [2]string{"before", "after"}, held: true},
		{name: "answered across the reload", answer: [2]string{"before", "after"}},
		{name: "answered after the reload", answer: [2]string{"after", "after"}},
	}
	var (
		heldArrived []<-chan struct{}
		releases    []func()
	)
	for i, f := range flights {
		f.names = []string{fmt.Sprintf("r%d.example.com", i), fmt.Sprintf("www.r%d.example.com", i)}
		var err error
		if f.order, err = c.AuthorizeOrder(ctx, xacme.DomainIDs(f.names...)); err != nil {
			t.Fatalf("%s: AuthorizeOrder: %v", f.name, err)
		}
		if len(f.order.AuthzURLs) != 2 {
			t.Fatalf("%s: %d authorizations, want 2", f.name, len(f.order.AuthzURLs))
		}
		for j, u := range f.order.AuthzURLs {
			f.pending[j] = e2ePendingHTTP01(ctx, t, c, srv, u)
		}
		if f.held {
			arrived, release := srv.holdBack(f.pending[0].Token)
			heldArrived, releases = append(heldArrived, arrived), append(releases, release)
			t.Cleanup(release)
		}
	}
	answer := func(when string) {
		for _, f := range flights {
			for j, ch := range f.pending {
				if f.answer[j] == when && !f.answered[j] {
					e2eAccept(ctx, t, c, ch)
					f.answered[j] = true
				}
			}
		}
	}

	answer("before")
	for _, f := range flights {
		if f.ready {
			for _, u := range f.order.AuthzURLs {
				if _, err := c.WaitAuthorization(ctx, u); err != nil {
					t.Fatalf("%s: WaitAuthorization: %v", f.name, err)
				}
			}
		}
	}
	// The held validations are running in the old config's job runner.
	for _, arrived := range heldArrived {
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("a held validation never reached the challenge server")
		}
	}

	// The reload: a second profile joins the site. The held validations
	// are let go once the new config serves, while the old one stops.
	start := time.Now()
	served := make(chan struct{})
	go func() {
		defer close(served)
		client := &http.Client{Timeout: time.Second, Transport: env.client.Transport}
		for ctx.Err() == nil {
			if resp, err := client.Get(env.directoryURL("second")); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, release := range releases {
			release()
		}
	}()
	cfg.ExtraProfiles = "acme_proxy {\nprofile second\n}"
	env.load(t, cfg)
	t.Logf("reloaded in %s", time.Since(start).Round(time.Millisecond))
	<-served

	answer("after")
	for _, f := range flights {
		t.Run(f.name, func(t *testing.T) {
			chain := e2eFinishOrder(ctx, t, c, f.order, f.names)
			env.checkIssued(t, chain, f.names...)
		})
	}
	t.Logf("all orders valid %s after the reload", time.Since(start).Round(time.Millisecond))
}

// TestCaddyAsAClientRegistersWithAnEABKeyAndReadsTheRenewalWindow has a
// Caddy site's ACME issuer register at a profile that requires external
// account binding, with a key minted by the CLI, obtain its certificate
// there, and read that certificate's renewal window (RFC 9773), as the
// README says Caddy does.
func TestCaddyAsAClientRegistersWithAnEABKeyAndReadsTheRenewalWindow(t *testing.T) {
	env := newE2EEnv(t)
	env.createLocalCA(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	bound := fmt.Sprintf("acme_proxy {\nprofile bound\neab required\nresolvers %s\nvalidation_ports {\nhttp %d\n}\n}", env.DNSAddr, env.HTTPPort)
	cfg := e2eConfig{ValidationHTTP: env.HTTPPort, ValidationTLS: env.HTTPSPort, Admin: b.admin, ExtraProfiles: bound}
	env.load(t, cfg)
	unloadAdminOnCleanup(t)
	key := b.mintByCLI(t, "--label", "caddy-sites")

	const name = "eab-site.example.com"
	cfg.ExtraSites = fmt.Sprintf(`
https://%s {
	tls {
		issuer acme {
			dir %s
			trusted_roots %s
			disable_tlsalpn_challenge
			alt_http_port %d
			eab %s %s
		}
	}
	respond "hello"
}
`, name, env.directoryURL("bound"), env.rootFile, env.HTTPPort, key.KID, key.HMACKey)
	env.load(t, cfg)

	env.servedByProxy(t, name)

	out, err := b.cliRun("accounts", "--profile", "bound", "--json")
	if err != nil || !strings.Contains(out, `"caddy-sites"`) {
		t.Errorf("caddy acme-proxy accounts --profile bound: %v\n%s\nwant Caddy's account, bound by the key labelled caddy-sites", err, out)
	}

	// certmagic reads the renewal window of a certificate it obtained and
	// logs it (logger http.acme_client, "got renewal info").
	for deadline := time.Now().Add(e2eWait); ; {
		log, _ := os.ReadFile(env.LogFile)
		if caddyLoggedRenewalInfo(log, name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy never read the renewal window of %s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caddyLoggedRenewalInfo reports whether Caddy's JSON log holds certmagic's
// line for a renewal window it read for name, with a window.
func caddyLoggedRenewalInfo(log []byte, name string) bool {
	for line := range bytes.Lines(log) {
		var entry struct {
			Msg         string   `json:"msg"`
			Names       []string `json:"names"`
			WindowStart int64    `json:"window_start"`
			WindowEnd   int64    `json:"window_end"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "got renewal info" &&
			slices.Contains(entry.Names, name) && entry.WindowStart > 0 && entry.WindowEnd >= entry.WindowStart {
			return true
		}
	}
	return false
}

// servedByProxy waits until Caddy serves a certificate for name on its
// HTTPS port, checks that it is issued for name and that the proxy issued
// it (Caddy's internal issuer signs with the same CA), and returns its
// leaf.
func (env *e2eEnv) servedByProxy(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", env.HTTPSPort)
	var (
		state tls.ConnectionState
		err   error
	)
	for deadline := time.Now().Add(e2eWait); ; {
		state, err = e2eHandshake(t.Context(), addr, &tls.Config{ServerName: name, RootCAs: env.rootPool})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no certificate for %s served by %s after %s: %v", name, addr, e2eWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var chain [][]byte
	for _, c := range state.PeerCertificates {
		chain = append(chain, c.Raw)
	}
	leaf := env.checkIssued(t, chain, name)
	if !env.proxyIssued(t, leaf.SerialNumber) {
		t.Errorf("the served certificate (serial %x) is not one the proxy issued", leaf.SerialNumber)
	}
	return leaf
}
