package caddyacmeproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// A profile's validator follows an http-01 redirect only to a host the
// profile's identifier policy allows: the glue hands the policy to it.
func TestAProfilesValidatorFollowsNoRedirectToAHostItsPolicyRefuses(t *testing.T) {
	d, err := testdns.Start("example.test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const keyAuth = "tok.thumbprint"
	var port string
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/acme-challenge/{token}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("token") {
		case "to-self":
			http.Redirect(w, r, "http://"+net.JoinHostPort("www.example.test", port)+"/final", http.StatusFound)
		case "to-denied":
			http.Redirect(w, r, "http://"+net.JoinHostPort("secret.example.test", port)+"/final", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, keyAuth) })
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	_, port, _ = net.SplitHostPort(hs.Listener.Addr().String())
	httpPort, _ := strconv.Atoi(port)

	cfg := acmeproxy.ProfileConfig{
		Profile:         "p",
		Resolvers:       []string{d.Addr},
		ValidationPorts: &acmeproxy.ValidationPorts{HTTP: httpPort},
		Deny:            &acmeproxy.IdentifierPolicy{Domains: []string{"secret.example.test"}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := newValidator(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := v.HTTP01(ctx, "dns", "www.example.test", "to-self", keyAuth); err != nil {
		t.Fatalf("a redirect to the identifier's own host: %v", err)
	}
	err = v.HTTP01(ctx, "dns", "www.example.test", "to-denied", keyAuth)
	p, ok := problem.As(err)
	if !ok || p.Type != acme.ErrorConnection || !strings.Contains(p.Detail, "a redirect to secret.example.test is not allowed: secret.example.test is denied by this profile's policy") {
		t.Fatalf("got %v, want the redirect refused by the deny list", err)
	}
}
