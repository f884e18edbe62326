package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/spf13/cobra"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// newAuditBench loads the e2e config with the admin endpoint on and
// appExtra in the global acme_proxy block, and returns it with the config
// loaded, for a reload.
func newAuditBench(t *testing.T, appExtra string) (*revokeBench, e2eConfig) {
	t.Helper()
	env := newE2EEnv(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin, AppExtra: appExtra}
	env.load(t, cfg)
	unloadAdminOnCleanup(t)
	return b, cfg
}

// throwawayRevoke sends revoke-cert signed by a fresh key (jwk) with a
// payload that is not JSON, as anyone on the network can, and returns the
// status.
func (b *revokeBench) throwawayRevoke(t *testing.T, userAgent string) int {
	t.Helper()
	return b.throwawayRevokeWith(t, http.Header{"User-Agent": {userAgent}})
}

// throwawayRevokeWith is throwawayRevoke with the request's headers.
func (b *revokeBench) throwawayRevokeWith(t *testing.T, header http.Header) int {
	t.Helper()
	base := strings.TrimSuffix(b.env.directoryURL(e2eProfile), "directory")
	resp, err := b.env.client.Head(base + "new-nonce")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, &jose.SignerOptions{EmbedJWK: true,
		ExtraHeaders: map[jose.HeaderKey]any{"nonce": resp.Header.Get("Replay-Nonce"), "url": base + "revoke-cert"}})
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign([]byte("not json"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"revoke-cert", strings.NewReader(jws.FullSerialize()))
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/jose+json")
	resp, err = b.env.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestThrowawayKeysFloodingRevokeCertThroughCaddyCostOneSummaryRow(t *testing.T) {
	b, cfg := newAuditBench(t, "")
	app := activeApp(t)
	if app.auditRetention != acmeproxy.DefaultAuditRetention {
		t.Errorf("retention %s by default; want %s", app.auditRetention, acmeproxy.DefaultAuditRetention)
	}
	refused := func() float64 {
		return metricValue(t, b.scrape(t), "caddy_acme_proxy_revocations_refused_total", `profile="e2e"`, `reason="malformed"`)
	}
	rows := func(event string) []store.AuditEvent {
		evs, err := activeApp(t).db.SearchAudit(context.Background(), store.AuditFilter{Event: event, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	counted := refused()
	ua := "flood/1.0 " + strings.Repeat("A", 16<<10)
	for i := range 200 {
		if status := b.throwawayRevoke(t, ua); status != http.StatusBadRequest {
			t.Fatalf("request %d: %d; want 400 malformed", i, status)
		}
	}
	if n := len(rows(acme.EventRevocationRefused)); n != 0 {
		t.Errorf("200 requests signed by throwaway keys wrote %d audit rows; want none of their own", n)
	}
	if got := refused() - counted; got != 200 {
		t.Errorf("revocations_refused_total{reason=\"malformed\"} grew by %v; want 200", got)
	}
	// A reload unmounts the profile's server: what it counted is written.
	b.env.load(t, cfg)
	sum := rows(acme.EventRevocationRefusals)
	if len(sum) != 1 || sum[0].ClientIP != "127.0.0.1" ||
		!strings.HasPrefix(sum[0].Detail, "200 refused revocation requests from 127.0.0.1 ") || sum[0].UserAgent != "" {
		t.Errorf("summary rows after the reload: %+v; want one of the 200 refusals", sum)
	}
}

// Behind a proxy Caddy trusts (trusted_proxies), the client is the
// address Caddy took from the proxy's X-Forwarded-For, as in Caddy's own
// logs and client_ip matcher: refusals are tallied, and per-address
// limits counted, by that client, not by the proxy all clients share.
// A header from a peer Caddy does not trust changes nothing.
func TestBehindATrustedProxyTheClientIsTheAddressCaddyResolved(t *testing.T) {
	tests := []struct {
		name    string
		trusted string // the trusted_proxies ranges; "" for none
		from    []string
		want    []string // the summary rows' client addresses
	}{
		{"ok/a trusted proxy's forwarded clients are told apart", "127.0.0.1/32",
			[]string{"203.0.113.7", "203.0.113.7", "198.51.100.9"}, []string{"198.51.100.9", "203.0.113.7"}},
		{"ok/an untrusted peer's header is ignored", "",
			[]string{"203.0.113.7", "198.51.100.9"}, []string{"127.0.0.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			b := &revokeBench{env: env}
			cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t)}
			if tc.trusted != "" {
				cfg.GlobalExtra = "servers {\n\t\ttrusted_proxies static " + tc.trusted + "\n\t}"
			}
			env.load(t, cfg)
			for _, ip := range tc.from {
				if status := b.throwawayRevokeWith(t, http.Header{"X-Forwarded-For": {ip}}); status != http.StatusBadRequest {
					t.Fatalf("from %s: %d; want 400 malformed", ip, status)
				}
			}
			// A reload writes what the profile's server counted.
			env.load(t, cfg)
			evs, err := activeApp(t).db.SearchAudit(context.Background(), store.AuditFilter{Event: acme.EventRevocationRefusals})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range evs {
				got = append(got, ev.ClientIP)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("summary rows from %q; want %q", got, tc.want)
			}
		})
	}
}

// Caddy stops its apps, then cleans its modules up in no set order: the
// app may release the store before a handler's Cleanup writes what it
// counted after the app stopped (a refused revoke-cert still in flight
// while the HTTP server drained). Those counts must still be written.
func TestRefusalsCountedAfterTheAppStoppedAreWrittenWhenTheAppIsCleanedUpFirst(t *testing.T) {
	b, _ := newAuditBench(t, "")
	app := activeApp(t)
	path := app.Database
	if err := app.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if status := b.throwawayRevoke(t, "late/1.0"); status != http.StatusBadRequest {
			t.Fatalf("request %d: %d; want 400 malformed", i, status)
		}
	}
	// The order Caddy may pick: the app first, then (at the stop) the
	// handler, whose store is then closed unless the app wrote its counts.
	if err := app.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}

	db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sum, err := db.SearchAudit(context.Background(), store.AuditFilter{Event: acme.EventRevocationRefusals, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum) != 1 || !strings.HasPrefix(sum[0].Detail, "3 refused revocation requests from 127.0.0.1 ") {
		t.Errorf("summary rows after the stop: %+v; want one of the 3 refusals", sum)
	}
}

// auditOrders writes one certificate_issued row per age, its order named
// by the age, and returns a function listing the orders of the rows left.
func auditOrders(t *testing.T, db *store.DB, now time.Time, ages ...time.Duration) func() []string {
	t.Helper()
	for _, age := range ages {
		if err := db.InsertAudit(context.Background(), store.AuditEvent{At: now.Add(-age), Event: acme.EventCertificateIssued,
			Outcome: authority.OutcomeSuccess, Profile: e2eProfile, OrderID: "age-" + age.String()}); err != nil {
			t.Fatal(err)
		}
	}
	return func() []string {
		evs, err := db.SearchAudit(context.Background(), store.AuditFilter{Event: acme.EventCertificateIssued, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.OrderID)
		}
		return out
	}
}

// cliRun runs `caddy acme-proxy args…` against the bench's admin endpoint.
func (b *revokeBench) cliRun(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := &cobra.Command{Use: "acme-proxy"}
	configureCLI(cmd, &out)
	// The address first, so that args may end in "--" and positional ones.
	cmd.SetArgs(append([]string{"--address", b.admin}, args...))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	return out.String(), err
}

func TestTheOperatorPrunesTheAuditTrailThroughTheAdminAPIAndTheCLI(t *testing.T) {
	b, _ := newAuditBench(t, "audit_retention keep")
	app := activeApp(t)
	if app.auditRetention != 0 {
		t.Fatalf("audit_retention keep: retention %s; want none", app.auditRetention)
	}
	day := 24 * time.Hour
	now := time.Now()
	left := auditOrders(t, app.db, now, 100*day, 60*day, 10*day, time.Hour)
	prunes := func() []store.AuditEvent {
		evs, err := app.db.SearchAudit(context.Background(), store.AuditFilter{Event: acme.EventAuditPruned})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}

	cutoff := now.Add(-90 * day).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, method, uri string
		want              int
		has               string
	}{
		{"fail/prune by GET", "GET", "/acme_proxy/audit/prune?before=" + cutoff, 405, "use POST"},
		{"fail/prune without a cutoff", "POST", "/acme_proxy/audit/prune", 400, "before (the cutoff) is required"},
		{"fail/prune with a cutoff that is not RFC 3339", "POST", "/acme_proxy/audit/prune?before=90d", 400, "RFC 3339"},
		{"fail/prune with a cutoff in the future", "POST", "/acme_proxy/audit/prune?before=" + url.QueryEscape(now.Add(time.Hour).Format(time.RFC3339)), 400, "in the future"},
		{"fail/prune with an unknown parameter", "POST", "/acme_proxy/audit/prune?before=" + cutoff + "&profile=e2e", 400, "unknown parameter"},
		{"fail/another word under audit", "POST", "/acme_proxy/audit/purge?before=" + cutoff, 404, "no acme_proxy admin route"},
	} {
		t.Run("api/"+tc.name, func(t *testing.T) {
			status, body := b.adminCall(t, tc.method, tc.uri, "")
			if status != tc.want || !bytes.Contains(body, []byte(tc.has)) {
				t.Fatalf("%s %s: %d %s; want %d with %q", tc.method, tc.uri, status, body, tc.want, tc.has)
			}
		})
	}
	if got := fmt.Sprint(left()); got != "[age-1h0m0s age-240h0m0s age-1440h0m0s age-2400h0m0s]" || len(prunes()) != 0 {
		t.Fatalf("a refused prune changed the trail: %s, %d prune rows", got, len(prunes()))
	}

	status, body := b.adminCall(t, "POST", "/acme_proxy/audit/prune?before="+cutoff, "")
	var v operator.AuditPruneView
	if status != 200 || json.Unmarshal(body, &v) != nil || v.Deleted != 1 || v.Before.Format(time.RFC3339) != cutoff {
		t.Fatalf("prune by the admin API: %d %s; want 1 deleted before %s", status, body, cutoff)
	}
	if got := fmt.Sprint(left()); got != "[age-1h0m0s age-240h0m0s age-1440h0m0s]" {
		t.Errorf("after the admin API's prune: %s; want only the 100-day-old row gone", got)
	}
	p := prunes()
	if len(p) != 1 || p[0].ActorKind != authority.ActorAdmin || p[0].ActorID != "127.0.0.1" ||
		p[0].Detail != "deleted 1 audit rows older than "+cutoff {
		t.Errorf("the admin API's prune is recorded as %+v", p)
	}

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"fail/prune without --before", []string{"audit", "prune"}, "--before is required"},
		{"fail/prune with a --before that is neither", []string{"audit", "prune", "--before", "soon"}, `--before "soon" is neither`},
		{"fail/prune with an argument", []string{"audit", "prune", "everything"}, "unknown command"},
	} {
		t.Run("cli/"+tc.name, func(t *testing.T) {
			if _, err := b.cliRun(tc.args...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("caddy acme-proxy %s: %v; want an error containing %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
		})
	}
	out, err := b.cliRun("audit", "prune", "--before", "30d")
	if err != nil || !strings.Contains(out, "deleted 1 audit rows older than ") {
		t.Fatalf("caddy acme-proxy audit prune --before 30d: %v\n%s", err, out)
	}
	if got := fmt.Sprint(left()); got != "[age-1h0m0s age-240h0m0s]" {
		t.Errorf("after the CLI's prune by age: %s; want the 60-day-old row gone too", got)
	}
	out, err = b.cliRun("audit", "prune", "--before", now.Add(-5*day).Format(time.RFC3339), "--json")
	if err != nil || !strings.Contains(out, `"deleted": 1`) {
		t.Fatalf("caddy acme-proxy audit prune --before <RFC 3339> --json: %v\n%s", err, out)
	}
	if got := fmt.Sprint(left()); got != "[age-1h0m0s]" {
		t.Errorf("after the CLI's prune by time: %s; want the row of an hour ago only", got)
	}
	p = prunes()
	if len(p) != 3 || p[0].ActorKind != authority.ActorCLI || p[1].ActorKind != authority.ActorCLI || p[2].ActorKind != authority.ActorAdmin {
		t.Errorf("prune rows %+v; want the CLI's two after the admin API's", p)
	}
	// The CLI's listing shows the prunes, which no prune deleted.
	out, err = b.cliRun("audit", "--event", acme.EventAuditPruned)
	if err != nil || strings.Count(out, acme.EventAuditPruned) != 3 || !strings.Contains(out, "cli:") {
		t.Errorf("caddy acme-proxy audit --event audit_pruned: %v\n%s", err, out)
	}
}

func TestTheAuditSweepDeletesRowsPastTheConfiguredRetention(t *testing.T) {
	b, _ := newAuditBench(t, "audit_retention 30d")
	app := activeApp(t)
	if app.auditRetention != 30*24*time.Hour {
		t.Fatalf("audit_retention 30d: retention %s", app.auditRetention)
	}
	day := 24 * time.Hour
	left := auditOrders(t, app.db, time.Now(), 31*day, 29*day)
	// Run the hourly sweep now, as an operator would.
	status, body := b.adminCall(t, "GET", "/acme_proxy/jobs?kind="+authority.AuditSweepKind, "")
	var jobs operator.Page[operator.JobView]
	if status != 200 || json.Unmarshal(body, &jobs) != nil || len(jobs.Items) != 1 {
		t.Fatalf("the audit_sweep job: %d %s; want one", status, body)
	}
	id := strconv.FormatInt(jobs.Items[0].ID, 10)
	deadline := time.Now().Add(e2eWait)
	for fmt.Sprint(left()) != "[age-696h0m0s]" {
		if time.Now().After(deadline) {
			t.Fatalf("rows left %v; want the 29-day-old one only", left())
		}
		b.adminCall(t, "POST", "/acme_proxy/jobs/"+id+"/retry", "") // 409 while it runs: the next try
		time.Sleep(50 * time.Millisecond)
	}
	evs, err := app.db.SearchAudit(context.Background(), store.AuditFilter{Event: acme.EventAuditPruned})
	if err != nil || len(evs) != 1 || evs[0].ActorKind != authority.ActorSystem || !strings.Contains(evs[0].Detail, "(audit_retention 30d)") {
		t.Errorf("the sweep's record: %+v, %v", evs, err)
	}
}
