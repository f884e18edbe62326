package caddyacmeproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
)

// scrape reads the admin endpoint's /metrics.
func (b *revokeBench) scrape(t *testing.T) string {
	t.Helper()
	status, body := b.adminCall(t, http.MethodGet, "/metrics", "")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	return string(body)
}

// metricValue is the value of the sample of name whose labels include
// every one of labels ("k=\"v\""); 0 when there is none.
func metricValue(t *testing.T, exposition, name string, labels ...string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(series, l)
		}
		if all {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

func TestMetricsMoveWithIssuanceFailedValidationAndRevocationAndSurviveAReload(t *testing.T) {
	// A webhook configured in the Caddyfile's global option receives the
	// issuance and the revocation, signed with the secret from {env.*}.
	t.Setenv("E2E_HOOK_SECRET", "caddyfile-secret")
	var (
		mu     sync.Mutex
		events []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(notify.SignatureHeader) != notify.Sign("caddyfile-secret", body) {
			t.Errorf("a delivery with a bad signature: %s", body)
		}
		var ev notify.Event
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		events = append(events, ev.Event)
		mu.Unlock()
	}))
	defer hook.Close()
	waitEvent := func(name string) {
		t.Helper()
		deadline := time.Now().Add(e2eWait)
		for {
			mu.Lock()
			n := strings.Count(strings.Join(events, " "), name)
			mu.Unlock()
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s delivery reached the Caddyfile's webhook", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	env := newE2EEnv(t)
	ln := e2eListen(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t)), srv: serveE2EHTTP01(t, ln)}
	cfg := e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t), Admin: b.admin,
		AppExtra: fmt.Sprintf("notify webhook %s/acme {\n secret {env.E2E_HOOK_SECRET}\n events certificate_issued certificate_revoked\n}", hook.URL)}
	env.load(t, cfg)
	unloadAdminOnCleanup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()

	profile := `profile="` + e2eProfile + `"`
	before := b.scrape(t)
	c := newE2EXCrypto(ctx, t, env)
	got := b.obtain(ctx, t, c, "metrics.example.com")

	// A failed validation: the client's server answers the wrong thing.
	o, err := c.AuthorizeOrder(ctx, xacme.DomainIDs("wrong.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	ch := e2ePendingHTTP01(ctx, t, c, b.srv, o.AuthzURLs[0])
	b.srv.set(ch.Token, "wrong")
	e2eAccept(ctx, t, c, ch)
	if _, err := c.WaitAuthorization(ctx, o.AuthzURLs[0]); err == nil {
		t.Fatal("a wrong http-01 answer validated")
	}

	if status, body := b.adminCall(t, http.MethodPost, "/acme_proxy/orders/"+got.order+"/revoke", `{"reason":1}`); status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, body)
	}
	waitEvent(acme.EventCertificateIssued)
	waitEvent(acme.EventCertificateRevoked)

	// The receiver saw the deliveries; their jobs settle a moment later.
	var after string
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(10 * time.Millisecond) {
		after = b.scrape(t)
		if metricValue(t, after, "caddy_acme_proxy_jobs", `kind="notify_deliver"`, `status="done"`) >= 2 &&
			metricValue(t, after, "caddy_acme_proxy_job_runs_total", `kind="notify_deliver"`, `outcome="done"`) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deliveries' jobs never settled:\n%s", after)
		}
	}
	// One certificate, one revocation and one validation of each outcome
	// move their counters by exactly one: never twice for one deed.
	checks := []struct {
		name   string
		labels []string
		delta  float64
		exact  bool
	}{
		{"caddy_acme_proxy_certificates_issued_total", []string{profile}, 1, true},
		{"caddy_acme_proxy_revocations_total", []string{profile}, 1, true},
		{"caddy_acme_proxy_validations_total", []string{profile, `challenge="http-01"`, `outcome="invalid"`}, 1, true},
		{"caddy_acme_proxy_validations_total", []string{profile, `challenge="http-01"`, `outcome="valid"`}, 1, true},
		{"caddy_acme_proxy_requests_total", []string{profile, `route="order/finalize"`, `status="200"`}, 1, false},
		{"caddy_acme_proxy_requests_total", []string{profile, `route="new-account"`, `status="201"`}, 1, false},
		{"caddy_acme_proxy_job_runs_total", []string{`kind="notify_deliver"`, `outcome="done"`}, 2, false},
	}
	for _, c := range checks {
		d := metricValue(t, after, c.name, c.labels...) - metricValue(t, before, c.name, c.labels...)
		if d < c.delta || (c.exact && d != c.delta) {
			t.Errorf("%s%v moved by %v, want %v (exactly: %v)", c.name, c.labels, d, c.delta, c.exact)
		}
	}
	for _, gauge := range []string{"caddy_acme_proxy_jobs", "caddy_acme_proxy_used_nonces", "caddy_acme_proxy_crl_next_update_timestamp_seconds",
		"caddy_acme_proxy_request_duration_seconds_count", "caddy_acme_proxy_job_duration_seconds_count"} {
		if !strings.Contains(after, "\n"+gauge) {
			t.Errorf("/metrics lacks %s", gauge)
		}
	}
	// No identifier, serial or address ever becomes a label value.
	for _, leak := range []string{"metrics.example.com", "wrong.example.com", got.order, fmt.Sprintf("%x", got.leaf.SerialNumber), "127.0.0.1"} {
		if strings.Contains(after, leak) {
			t.Errorf("/metrics carries %q", leak)
		}
	}

	// A config reload keeps the counters, and they go on counting.
	env.load(t, cfg)
	reloaded := b.scrape(t)
	issued := metricValue(t, after, "caddy_acme_proxy_certificates_issued_total", profile)
	if v := metricValue(t, reloaded, "caddy_acme_proxy_certificates_issued_total", profile); v != issued {
		t.Errorf("after a reload certificates_issued_total is %v, want %v", v, issued)
	}
	if v := metricValue(t, reloaded, "caddy_acme_proxy_revocations_total", profile); v < 1 {
		t.Errorf("after a reload revocations_total is %v", v)
	}
	b.obtain(ctx, t, c, "after-reload.example.com")
	if v := metricValue(t, b.scrape(t), "caddy_acme_proxy_certificates_issued_total", profile); v != issued+1 {
		t.Errorf("an issuance after the reload made certificates_issued_total %v, want %v", v, issued+1)
	}
}
