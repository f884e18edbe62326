package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/spf13/cobra"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// revokeBench is one Caddy with its admin endpoint on, serving the e2e
// profile, and certificates obtained from it.
type revokeBench struct {
	env   *e2eEnv
	admin string // host:port of the admin endpoint
	srv   *e2eHTTP01Server
}

// newRevokeBench loads the e2e config with the admin endpoint on; the
// profile validates http-01 on httpPort, or, when it is 0, on a server of
// the bench's own.
func newRevokeBench(t *testing.T, httpPort int) *revokeBench {
	t.Helper()
	env := newE2EEnv(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	if httpPort == 0 {
		ln := e2eListen(t)
		b.srv, httpPort = serveE2EHTTP01(t, ln), e2ePort(ln)
	}
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t), Admin: b.admin})
	unloadAdminOnCleanup(t)
	return b
}

// unloadAdminOnCleanup replaces, on cleanup, the config by one without an
// admin endpoint: caddy.Stop leaves the endpoint up. Call it after the
// load that started Caddy, so that it runs before that load's cleanup
// stops Caddy.
func unloadAdminOnCleanup(t *testing.T) {
	t.Cleanup(func() {
		if err := caddy.Load([]byte(`{"admin":{"disabled":true,"config":{"persist":false}}}`), true); err != nil {
			t.Errorf("unloading: %v", err)
		}
	})
}

// obtained is a certificate obtained from the bench.
type obtained struct {
	order string
	chain [][]byte
	leaf  *x509.Certificate
}

// obtain has c get a certificate for names by http-01.
func (b *revokeBench) obtain(ctx context.Context, t *testing.T, c *xacme.Client, names ...string) obtained {
	t.Helper()
	o, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(names...))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	for _, u := range o.AuthzURLs {
		e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, b.srv, u))
	}
	chain := e2eFinishOrder(ctx, t, c, o, names)
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		t.Fatal(err)
	}
	return obtained{order: path.Base(o.URI), chain: chain, leaf: leaf}
}

// crl fetches the profile's CRL until it lists every serial, and returns
// its DER.
func (b *revokeBench) crl(t *testing.T, serials ...*big.Int) []byte {
	t.Helper()
	url := strings.TrimSuffix(b.env.directoryURL(e2eProfile), "directory") + "crl"
	deadline := time.Now().Add(e2eWait)
	for {
		resp, err := b.env.client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		der, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			crl, err := x509.ParseRevocationList(der)
			if err != nil {
				t.Fatalf("the CRL does not parse: %v", err)
			}
			all := true
			for _, s := range serials {
				found := false
				for _, e := range crl.RevokedCertificateEntries {
					found = found || e.SerialNumber.Cmp(s) == 0
				}
				all = all && found
			}
			if all {
				return der
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d; the CRL never listed %v", url, resp.StatusCode, serials)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pemFile(t *testing.T, dir, name, typ string, ders ...[]byte) string {
	t.Helper()
	var buf bytes.Buffer
	for _, d := range ders {
		_ = pem.Encode(&buf, &pem.Block{Type: typ, Bytes: d})
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// needOpenSSL returns openssl's path, or skips (fails with ACMEPROXY_E2E=1).
func needOpenSSL(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("openssl")
	if err == nil {
		return p
	}
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatalf("openssl is not on PATH; ACMEPROXY_E2E=1 requires it")
	}
	t.Skip("skipping: openssl is not on PATH")
	return ""
}

func TestLegoRevokesAndOpenSSLRejectsTheLeafWithTheServedCRL(t *testing.T) {
	openssl := needOpenSSL(t)
	httpPort := freePort(t)
	b := newRevokeBench(t, httpPort)
	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	lego := newE2ELego(t, b.env)
	if err := lego.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
		t.Fatal(err)
	}
	obtain := func(name string) [][]byte {
		res, err := lego.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{name}, Bundle: true, KeyType: certcrypto.EC256})
		if err != nil {
			t.Fatalf("lego Obtain: %v", err)
		}
		return e2ePEMChain(t, res.Certificate)
	}
	chain, kept := obtain("lego-revoked.example.com"), obtain("lego-kept.example.com")
	leaf, _ := x509.ParseCertificate(chain[0])
	reason := uint(1)
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: chain[0]})
	if err := lego.Certificate.RevokeWithReason(ctx, bundle, &reason); err != nil {
		t.Fatalf("lego RevokeWithReason: %v", err)
	}
	der := b.crl(t, leaf.SerialNumber)
	crl, _ := x509.ParseRevocationList(der)
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(leaf.SerialNumber) == 0 && e.ReasonCode != 1 {
			t.Errorf("the CRL gives reason %d; want keyCompromise (1)", e.ReasonCode)
		}
	}
	lintcheck.CRL(t, der, nil)
	inter, err := x509.ParseCertificate(chain[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := crl.CheckSignatureFrom(inter); err != nil {
		t.Errorf("the CRL is not signed by the issuing intermediate: %v", err)
	}

	// openssl parses the CRL and, checking it, rejects the revoked leaf
	// and accepts one that was not revoked.
	dir := t.TempDir()
	crlDER := filepath.Join(dir, "crl.der")
	if err := os.WriteFile(crlDER, der, 0o600); err != nil {
		t.Fatal(err)
	}
	crlPEM := filepath.Join(dir, "crl.pem")
	out, err := exec.CommandContext(ctx, openssl, "crl", "-inform", "DER", "-in", crlDER, "-out", crlPEM, "-text").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl crl: %v\n%s", err, out)
	}
	text, _ := os.ReadFile(crlPEM)
	if !bytes.Contains(text, []byte(strings.ToUpper(leaf.SerialNumber.Text(16)))) || !bytes.Contains(text, []byte("Key Compromise")) {
		t.Errorf("openssl's view of the CRL lacks the serial or its reason:\n%s", text)
	}
	interFile := pemFile(t, dir, "inter.pem", "CERTIFICATE", chain[1])
	verify := func(leafDER []byte) (string, error) {
		leafFile := pemFile(t, t.TempDir(), "leaf.pem", "CERTIFICATE", leafDER)
		out, err := exec.CommandContext(ctx, openssl, "verify", "-crl_check", "-CAfile", b.env.rootFile,
			"-untrusted", interFile, "-CRLfile", crlPEM, leafFile).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(chain[0]); err == nil || !strings.Contains(out, "certificate revoked") {
		t.Errorf("openssl verify -crl_check of the revoked leaf: %v\n%s", err, out)
	}
	if out, err := verify(kept[0]); err != nil {
		t.Errorf("openssl verify -crl_check of a leaf never revoked: %v\n%s", err, out)
	}
}

// adminCall is one request to the admin API.
//
// Every config load, one that fails too, replaces Caddy's admin server
// (caddy.replaceLocalAdminServer): the new one listens on the same
// address beside the old one (SO_REUSEPORT), and the old one is shut down
// in the background once the load returns. A connection made meanwhile
// may land in the old socket's queue and be reset when it closes, before
// anything was read from it ("connect: connection reset by peer"); one
// kept alive from before the load is closed under a request. So each
// request goes on a connection of its own (adminClient), and one whose
// connection was refused or reset before it could have been read — a
// dial that failed, or any failure of a GET, which changes nothing — is
// sent again on a new one, until the old server is gone.
func (b *revokeBench) adminCall(t *testing.T, method, uri, body string) (int, []byte) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, "http://"+b.admin+uri, rd)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := adminClient.Do(req)
		if err != nil {
			var op *net.OpError
			if (errors.As(err, &op) && op.Op == "dial" || method == http.MethodGet) && time.Now().Before(deadline) {
				continue
			}
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
}

// adminClient sends each request to the admin API on a new connection
// (see adminCall).
var adminClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// activeApp is the running acme_proxy app.
func activeApp(t *testing.T) *App {
	t.Helper()
	app, err := caddy.ActiveContext().App("acme_proxy")
	if err != nil {
		t.Fatal(err)
	}
	return app.(*App)
}

func TestTheAdminAPIAndTheCLIServeEveryOperatorRoute(t *testing.T) {
	b := newRevokeBench(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, b.env)
	byAdmin := b.obtain(ctx, t, c, "admin.example.com")
	byCLI := b.obtain(ctx, t, c, "cli.example.com")
	kept := b.obtain(ctx, t, c, "kept.example.com")
	pending, err := c.AuthorizeOrder(ctx, xacme.DomainIDs("pending.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	pendingID := path.Base(pending.URI)
	other := newE2EXCrypto(ctx, t, b.env)
	app := activeApp(t)
	accounts, err := app.Operator().ListAccounts(ctx, store.AccountFilter{Profile: e2eProfile})
	if err != nil || len(accounts.Items) < 2 {
		t.Fatalf("accounts: %v %v", accounts, err)
	}
	ownerID, otherID := "", path.Base(string(other.KID))
	for _, a := range accounts.Items {
		if a.ID == path.Base(string(c.KID)) {
			ownerID = a.ID
		}
	}
	// A job nobody runs, for retry and cancel.
	idle, _, err := app.queue.Enqueue(ctx, jobs.Spec{Kind: "test_idle", Key: "one", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	idleID := strconv.FormatInt(idle.ID, 10)

	type check func(t *testing.T, body []byte)
	has := func(subs ...string) check {
		return func(t *testing.T, body []byte) {
			for _, s := range subs {
				if !bytes.Contains(body, []byte(s)) {
					t.Errorf("the answer lacks %q:\n%s", s, body)
				}
			}
		}
	}
	lacks := func(subs ...string) check {
		return func(t *testing.T, body []byte) {
			for _, s := range subs {
				if bytes.Contains(body, []byte(s)) {
					t.Errorf("the answer has %q:\n%s", s, body)
				}
			}
		}
	}
	shorter := func(n int) check {
		return func(t *testing.T, body []byte) {
			if len(body) >= n {
				t.Errorf("an answer of %d bytes; want fewer than %d", len(body), n)
			}
		}
	}
	all := func(cs ...check) check {
		return func(t *testing.T, body []byte) {
			for _, c := range cs {
				c(t, body)
			}
		}
	}
	items := func(want func(n int) bool, each func(map[string]any) bool) check {
		return func(t *testing.T, body []byte) {
			var p struct {
				Items []map[string]any `json:"items"`
			}
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("not a page: %v\n%s", err, body)
			}
			if !want(len(p.Items)) {
				t.Errorf("%d items:\n%s", len(p.Items), body)
			}
			for _, it := range p.Items {
				if each != nil && !each(it) {
					t.Errorf("item %v does not match the filter", it)
				}
			}
		}
	}
	atLeast := func(n int) func(int) bool { return func(m int) bool { return m >= n } }
	exactly := func(n int) func(int) bool { return func(m int) bool { return m == n } }
	field := func(k, v string) func(map[string]any) bool {
		return func(m map[string]any) bool { return fmt.Sprint(m[k]) == v }
	}
	byAdminActor := func(m map[string]any) bool { a, _ := m["actor"].(map[string]any); return a["kind"] == "admin" }
	serialOf := func(o obtained) string { return hex.EncodeToString(o.leaf.SerialNumber.Bytes()) }

	tests := []struct {
		name, method, uri, body string
		want                    int
		check                   check
	}{
		{"ok/profiles", "GET", "/acme_proxy/profiles", "", 200, has(`"name": "e2e"`, `"signer": "local_ca"`, `"revocation": "ledger"`)},
		{"fail/profiles by POST", "POST", "/acme_proxy/profiles", "", 405, has("method POST not allowed")},
		{"fail/unknown route", "GET", "/acme_proxy/nothing", "", 404, has("no acme_proxy admin route")},
		{"fail/too deep", "GET", "/acme_proxy/orders/a/b/c", "", 404, nil},
		{"fail/an unknown route of 10 KB is named in 128 bytes", "GET", "/acme_proxy/" + strings.Repeat("x", 10<<10), "", 404,
			all(has("no acme_proxy admin route /acme_proxy/xxx"), shorter(400))},
		{"fail/unknown parameter", "GET", "/acme_proxy/profiles?x=1", "", 400, has(`unknown parameter \"x\"`)},

		{"ok/orders", "GET", "/acme_proxy/orders", "", 200, items(atLeast(4), nil)},
		{"ok/orders by profile and status", "GET", "/acme_proxy/orders?profile=e2e&status=valid", "", 200,
			items(atLeast(3), field("status", "valid"))},
		{"ok/orders by identifier", "GET", "/acme_proxy/orders?identifier=Admin.Example.com.", "", 200,
			items(exactly(1), field("id", byAdmin.order))},
		{"ok/orders by account", "GET", "/acme_proxy/orders?account=" + otherID, "", 200, items(exactly(0), nil)},
		{"ok/orders paged", "GET", "/acme_proxy/orders?limit=1", "", 200, has(`"next": "`)},
		{"ok/orders after a cursor", "GET", "/acme_proxy/orders?limit=1000&after=" + byCLI.order, "", 200,
			items(atLeast(1), func(m map[string]any) bool { return m["id"] != byCLI.order && m["id"] != kept.order })},
		{"fail/orders by a bad status", "GET", "/acme_proxy/orders?status=done", "", 400, has(`status \"done\" is not one of`)},
		{"fail/orders with limit 0", "GET", "/acme_proxy/orders?limit=0", "", 400, has("parameter limit")},
		{"fail/orders with a limit that is not a number", "GET", "/acme_proxy/orders?limit=ten", "", 400, has("parameter limit")},
		{"fail/orders with a repeated parameter", "GET", "/acme_proxy/orders?status=valid&status=invalid", "", 400, has("given 2 times")},
		{"fail/orders with a malformed escape", "GET", "/acme_proxy/orders?status=valid%zz", "", 400, has(`parameter \"status\" is malformed`)},
		{"fail/orders with a semicolon", "GET", "/acme_proxy/orders?limit=1;status=valid", "", 400, has(`parameter \"limit\" is malformed`)},
		{"ok/order", "GET", "/acme_proxy/orders/" + byAdmin.order, "", 200, has(`"chain_pem": "-----BEGIN CERTIFICATE-----`, serialOf(byAdmin))},
		{"fail/unknown order", "GET", "/acme_proxy/orders/nope", "", 404, has("not found: order nope")},
		{"fail/an order id of 10 KB is not echoed", "GET", "/acme_proxy/orders/" + strings.Repeat("x", 10<<10), "", 404,
			all(has("no id is 10240 bytes long"), shorter(400))},
		{"fail/order by POST", "POST", "/acme_proxy/orders/" + byAdmin.order, "", 405, nil},

		{"fail/revoke by GET", "GET", "/acme_proxy/orders/" + byAdmin.order + "/revoke", "", 405, nil},
		{"fail/revoke with reason 7", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":7}`, 400, has("RFC 5280")},
		{"fail/revoke with reason 11", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":11}`, 400, has("RFC 5280")},
		{"fail/revoke with reason 8, which would leave it trusted", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":8}`, 400, has("RFC 5280", "0, 1, 3, 4, 5 or 9")},
		{"fail/revoke with a reason that is not a number", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":"key"}`, 400, has("the body must be", `\"reason\" is a JSON string, not a whole number`)},
		{"fail/revoke with an unknown field", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"why":1}`, 400, has("unknown field")},
		{"fail/revoke with more after the body", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":4} garbage`, 400, has("nothing after it")},
		{"fail/revoke with a body that is not an object", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `[1]`, 400, all(has("it is a JSON array"), lacks("Go value", "caddyacmeproxy"))},
		{"fail/revoke with a second body", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":1}{"reason":4}`, 400, has("nothing after it")},
		{"fail/revoke with a body past the limit", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", strings.Repeat(" ", 64<<10) + `{"reason":4}`, 413, has("larger than")},
		{"fail/revoke an unknown order", "POST", "/acme_proxy/orders/nope/revoke", `{"reason":1}`, 404, nil},
		{"fail/revoke an order without a certificate", "POST", "/acme_proxy/orders/" + pendingID + "/revoke", `{"reason":1}`, 409, has("has no certificate")},
		{"ok/revoke", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":1}`, 200,
			has(`"status": "revoked"`, `"reason": 1`, serialOf(byAdmin))},
		{"fail/revoke again", "POST", "/acme_proxy/orders/" + byAdmin.order + "/revoke", `{"reason":4}`, 409, has("already revoked")},
		{"ok/the revocation is audited", "GET", "/acme_proxy/audit?event=certificate_revoked&order=" + byAdmin.order, "", 200,
			items(exactly(1), func(m map[string]any) bool { return fmt.Sprint(m["actor"].(map[string]any)["kind"]) == "admin" })},

		{"ok/accounts", "GET", "/acme_proxy/accounts?profile=e2e", "", 200, items(atLeast(2), field("profile", "e2e"))},
		{"ok/accounts by status", "GET", "/acme_proxy/accounts?status=deactivated", "", 200, items(exactly(0), nil)},
		{"fail/accounts by a bad status", "GET", "/acme_proxy/accounts?status=gone", "", 400, nil},
		{"ok/account", "GET", "/acme_proxy/accounts/" + ownerID, "", 200, has(`"orders": 4`, `"status": "valid"`)},
		{"fail/unknown account", "GET", "/acme_proxy/accounts/nope", "", 404, nil},
		{"fail/deactivate by GET", "GET", "/acme_proxy/accounts/" + otherID + "/deactivate", "", 405, nil},
		{"fail/deactivate an unknown account", "POST", "/acme_proxy/accounts/nope/deactivate", "", 404, nil},
		{"fail/deactivate with a body, which is not acted on", "POST", "/acme_proxy/accounts/" + otherID + "/deactivate", "garbage", 400, has("the body must be empty or {}")},
		{"fail/deactivate with a field it does not take", "POST", "/acme_proxy/accounts/" + otherID + "/deactivate", `{"status":"valid"}`, 400, has("unknown field")},
		{"ok/deactivate", "POST", "/acme_proxy/accounts/" + otherID + "/deactivate", "", 200, has(`"status": "deactivated"`)},
		{"fail/deactivate again", "POST", "/acme_proxy/accounts/" + otherID + "/deactivate", "", 409, has("is deactivated already")},

		{"ok/jobs", "GET", "/acme_proxy/jobs", "", 200, items(atLeast(2), nil)},
		{"ok/jobs by kind and status", "GET", "/acme_proxy/jobs?kind=crl_regenerate&status=done", "", 200,
			items(atLeast(1), field("kind", "crl_regenerate"))},
		{"ok/jobs by key", "GET", "/acme_proxy/jobs?kind=test_idle&key=one", "", 200, items(exactly(1), field("key", "one"))},
		{"fail/jobs by a bad status", "GET", "/acme_proxy/jobs?status=sleeping", "", 400, nil},
		{"fail/jobs before a bad id", "GET", "/acme_proxy/jobs?before=-1", "", 400, nil},
		{"ok/job", "GET", "/acme_proxy/jobs/" + idleID, "", 200, has(`"kind": "test_idle"`)},
		{"fail/job id that is not a number", "GET", "/acme_proxy/jobs/abc", "", 400, has("not a positive whole number")},
		{"fail/unknown job", "GET", "/acme_proxy/jobs/999999", "", 404, nil},
		{"fail/retry by GET", "GET", "/acme_proxy/jobs/" + idleID + "/retry", "", 405, nil},
		{"fail/cancel with a body, which is not acted on", "POST", "/acme_proxy/jobs/" + idleID + "/cancel", `{"x":1}`, 400, has("unknown field")},
		{"fail/cancel with a parameter it does not take", "POST", "/acme_proxy/jobs/" + idleID + "/cancel?force=1", "", 400, has("this route takes none")},
		{"ok/cancel", "POST", "/acme_proxy/jobs/" + idleID + "/cancel", "{}", 200, has(`"status": "cancelled"`)},
		{"fail/cancel a cancelled job", "POST", "/acme_proxy/jobs/" + idleID + "/cancel", "", 409,
			has(`conflict: cannot cancel job ` + idleID + `: it is cancelled`)},
		{"ok/retry a cancelled job", "POST", "/acme_proxy/jobs/" + idleID + "/retry", "", 200, has(`"status": "ready"`)},
		{"fail/retry an unknown job", "POST", "/acme_proxy/jobs/999999/retry", "", 404, nil},
		{"ok/audit of the job's cancel", "GET", "/acme_proxy/audit?event=job_cancelled", "", 200, items(exactly(1), byAdminActor)},
		{"ok/audit of the job's retry", "GET", "/acme_proxy/audit?event=job_retried", "", 200, items(exactly(1), byAdminActor)},

		{"ok/audit by profile and outcome", "GET", "/acme_proxy/audit?profile=e2e&outcome=success", "", 200,
			items(atLeast(4), field("outcome", "success"))},
		{"ok/audit by serial", "GET", "/acme_proxy/audit?event=certificate_issued&serial=" + strings.ToUpper(serialOf(kept)), "", 200,
			items(exactly(1), field("order", kept.order))},
		{"ok/audit by account and time", "GET", "/acme_proxy/audit?account=" + ownerID + "&since=" + time.Now().Add(-time.Hour).Format(time.RFC3339) +
			"&until=" + time.Now().Add(time.Hour).Format(time.RFC3339), "", 200, items(atLeast(3), nil)},
		{"ok/audit paged", "GET", "/acme_proxy/audit?limit=1", "", 200, has(`"next": "`)},
		{"fail/audit by a bad outcome", "GET", "/acme_proxy/audit?outcome=maybe", "", 400, nil},
		{"fail/audit by an event that does not exist", "GET", "/acme_proxy/audit?event=revoked", "", 400,
			has(`event \"revoked\" is not one of certificate_issued, `)},
		{"fail/audit since a bad time", "GET", "/acme_proxy/audit?since=yesterday", "", 400, has("RFC 3339")},
		{"fail/audit with until before since", "GET", "/acme_proxy/audit?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "", 400, nil},
		{"fail/audit by POST", "POST", "/acme_proxy/audit", "", 405, nil},

		{"ok/crl", "GET", "/acme_proxy/crl/e2e", "", 200, has(`"profile": "e2e"`, `"entries": 1`)},
		{"fail/crl regenerate with a body, which is not acted on", "POST", "/acme_proxy/crl/e2e/regenerate", "garbage", 400, has("the body must be empty or {}")},
		{"ok/crl regenerate", "POST", "/acme_proxy/crl/e2e/regenerate", "", 200, has(`"entries": 1`)},
		{"ok/the crl regeneration is audited", "GET", "/acme_proxy/audit?event=crl_regenerated&profile=e2e", "", 200,
			items(exactly(1), byAdminActor)},
		{"fail/crl of an unknown profile", "GET", "/acme_proxy/crl/nope", "", 404, has("not mounted")},
		{"fail/crl regenerate by GET", "GET", "/acme_proxy/crl/e2e/regenerate", "", 405, nil},
		{"fail/crl by POST", "POST", "/acme_proxy/crl/e2e", "", 405, nil},
		{"fail/crl without a profile", "GET", "/acme_proxy/crl", "", 404, nil},
	}
	b.crl(t) // a CRL exists before "ok/crl"
	for _, tc := range tests {
		t.Run("api/"+tc.name, func(t *testing.T) {
			if tc.name == "ok/crl" {
				b.crl(t, byAdmin.leaf.SerialNumber)
			}
			status, body := b.adminCall(t, tc.method, tc.uri, tc.body)
			if status != tc.want {
				t.Fatalf("%s %s: %d %s; want %d", tc.method, tc.uri, status, body, tc.want)
			}
			if status >= 400 && !bytes.Contains(body, []byte(`"error"`)) {
				t.Errorf("an error without a message: %s", body)
			}
			if bytes.Contains(body, []byte("store:")) {
				t.Errorf("an answer in the store's words rather than the operator's: %s", body)
			}
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}

	// The CLI, run as `caddy acme-proxy …` runs it, against the same
	// admin endpoint.
	cliTests := []struct {
		name    string
		args    []string
		wantErr string   // a substring of the error; "" for success
		want    []string // substrings of the output
	}{
		{"ok/profiles", []string{"profiles"}, "", []string{"PROFILE", "e2e", "/acme/e2e", "local_ca", "ledger"}},
		{"ok/orders", []string{"orders", "--status", "valid"}, "", []string{"ORDER", byCLI.order, kept.order, "cli.example.com"}},
		{"ok/orders as JSON", []string{"orders", "--identifier", "cli.example.com", "--json"}, "", []string{`"items": [`, byCLI.order}},
		{"fail/orders by a bad status", []string{"orders", "--status", "done"}, "HTTP 400", nil},
		{"fail/orders with an argument", []string{"orders", "extra"}, "unknown command", nil},
		{"ok/order", []string{"orders", "show", byCLI.order}, "", []string{"order:", byCLI.order, "BEGIN CERTIFICATE", serialOf(byCLI)}},
		{"fail/unknown order", []string{"orders", "show", "nope"}, "HTTP 404", nil},
		{"fail/revoke with reason 7", []string{"revoke", byCLI.order, "--reason", "7"}, "HTTP 400", nil},
		{"fail/an unknown subcommand", []string{"bogus"}, `unknown command "bogus"`, nil},
		{"fail/an unknown crl subcommand", []string{"crl", "bogus"}, `unknown command "bogus"`, nil},
		{"fail/an unknown eab subcommand", []string{"eab", "bogus"}, `unknown command "bogus"`, nil},
		{"fail/revoke without an order", []string{"revoke"}, "want one order id, got 0 arguments", nil},
		{"fail/revoke an empty order id", []string{"revoke", ""}, `"" is not a valid order id`, nil},
		{"fail/an empty order id", []string{"orders", "show", " "}, `" " is not a valid order id`, nil},
		{"fail/an order id that is a path", []string{"orders", "show", byCLI.order + "/revoke"}, "is not a valid order id", nil},
		{"fail/an empty job id", []string{"jobs", "retry", ""}, `"" is not a valid job id`, nil},
		{"fail/an empty profile", []string{"crl", "regenerate", ""}, `"" is not a valid profile name`, nil},
		{"ok/revoke", []string{"revoke", byCLI.order, "--reason", "4"}, "", []string{"revoked order " + byCLI.order, serialOf(byCLI), "4 (superseded)"}},
		{"fail/revoke again", []string{"revoke", byCLI.order}, "HTTP 409", nil},
		{"ok/the CLI's revocation is audited", []string{"audit", "--event", "certificate_revoked", "--order", byCLI.order}, "",
			[]string{"certificate_revoked", "cli:", serialOf(byCLI)}},
		{"ok/audit as JSON", []string{"audit", "--order", byCLI.order, "--json"}, "", []string{`"event": "certificate_revoked"`, `"kind": "cli"`}},
		{"fail/audit by a bad outcome", []string{"audit", "--outcome", "maybe"}, "HTTP 400", nil},
		{"ok/audit since an age", []string{"audit", "--event", "certificate_revoked", "--order", byCLI.order, "--since", "1h"}, "",
			[]string{"certificate_revoked", byCLI.order}},
		{"fail/audit since something that is neither a time nor an age", []string{"audit", "--since", "yesterday"}, `--since "yesterday" is neither`, nil},
		{"ok/accounts", []string{"accounts", "--profile", "e2e"}, "", []string{"ACCOUNT", ownerID, otherID, "deactivated"}},
		{"ok/account", []string{"accounts", "show", ownerID}, "", []string{"account:", ownerID, "valid"}},
		{"fail/deactivate a deactivated account", []string{"accounts", "deactivate", otherID}, "HTTP 409", nil},
		{"ok/jobs", []string{"jobs", "--kind", "crl_regenerate"}, "", []string{"JOB", "crl_regenerate"}},
		{"ok/job", []string{"jobs", "show", idleID}, "", []string{"kind:", "test_idle", "ready"}},
		{"ok/cancel", []string{"jobs", "cancel", idleID}, "", []string{"cancelled"}},
		{"ok/retry", []string{"jobs", "retry", idleID}, "", []string{"ready"}},
		{"fail/job that is not a number", []string{"jobs", "show", "abc"}, "HTTP 400", nil},
		{"fail/retry an unknown job", []string{"jobs", "retry", "999999"}, "HTTP 404", nil},
		{"ok/crl", []string{"crl", "show", "e2e"}, "", []string{"profile:", "e2e", "entries:"}},
		{"ok/crl regenerate", []string{"crl", "regenerate", "e2e", "--json"}, "", []string{`"number":`}},
		{"ok/the crl regenerations are audited, the CLI's as the CLI's", []string{"audit", "--event", "crl_regenerated", "--json"}, "",
			[]string{`"kind": "cli"`, `"kind": "admin"`}},
		{"fail/crl of an unknown profile", []string{"crl", "show", "nope"}, "HTTP 404", nil},
		{"fail/no admin endpoint there", []string{"profiles", "--address", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, "connect", nil},
	}
	for _, tc := range cliTests {
		t.Run("cli/"+tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := &cobra.Command{Use: "acme-proxy"}
			configureCLI(cmd, &out)
			args := tc.args
			if !strings.Contains(strings.Join(args, " "), "--address") {
				args = append(args, "--address", b.admin)
			}
			cmd.SetArgs(args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("caddy acme-proxy %s: %v\n%s", strings.Join(tc.args, " "), err, out.String())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("caddy acme-proxy %s: error %v; want one containing %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	// Both revocations are in the CRL with their reasons.
	der := b.crl(t, byAdmin.leaf.SerialNumber, byCLI.leaf.SerialNumber)
	lintcheck.CRL(t, der, nil)
	crl, _ := x509.ParseRevocationList(der)
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(byCLI.leaf.SerialNumber) == 0 && e.ReasonCode != 4 {
			t.Errorf("the CLI's revocation has reason %d in the CRL; want 4", e.ReasonCode)
		}
	}
}
