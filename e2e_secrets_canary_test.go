package caddyacmeproxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// canaryServers are the failing outside parties of the canary test: two
// webhook receivers, an SMTP server and a relay's upstream, each
// recording what it was sent so that the test knows the secrets were
// really used.
type canaryServers struct {
	mu       sync.Mutex
	seen     []string // what each party was sent that should hold a secret
	upstream string   // the upstream's base URL
}

func (s *canaryServers) saw(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, what)
}

func (s *canaryServers) sawAny(secret string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.seen {
		if strings.Contains(x, secret) {
			return true
		}
	}
	return false
}

// refusingHook answers every delivery 503, its body quoting the
// request's secrets as a misconfigured gateway's page would.
func (s *canaryServers) refusingHook(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		quoted := fmt.Sprintf("POST %s Authorization=%q user=%s pass=%s sig=%s", r.RequestURI, r.Header.Get("Authorization"),
			user, pass, r.Header.Get(notify.SignatureHeader))
		s.saw(quoted)
		http.Error(w, "backend away: "+quoted, http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hangingUpHook drops every delivery's connection before answering: a
// transport error, whose Go text quotes the URL.
func (s *canaryServers) hangingUpHook(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		s.saw(fmt.Sprintf("hangup %s user=%s pass=%s X-Token=%s", r.RequestURI, user, pass, r.Header.Get("X-Token")))
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// refusingSMTP is an SMTP server offering AUTH PLAIN without TLS (Go
// allows it to 127.0.0.1) that refuses the credentials with a 535
// naming the user, as some servers do, and quoting the command, as
// sendmail quotes one it does not know.
func (s *canaryServers) refusingSMTP(t *testing.T) string {
	ln := e2eListen(t)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				r := bufio.NewReader(conn)
				fmt.Fprintf(conn, "220 canary.test ESMTP\r\n")
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimRight(line, "\r\n")
					cmd, arg, _ := strings.Cut(line, " ")
					switch strings.ToUpper(cmd) {
					case "EHLO", "HELO":
						fmt.Fprintf(conn, "250-canary.test\r\n250 AUTH PLAIN\r\n")
					case "AUTH":
						_, b64, _ := strings.Cut(arg, " ")
						raw, _ := base64.StdEncoding.DecodeString(b64)
						parts := strings.Split(string(raw), "\x00")
						s.saw("smtp " + strings.Join(parts, " ") + " " + line)
						user := ""
						if len(parts) == 3 {
							user = parts[1]
						}
						fmt.Fprintf(conn, "535 5.7.8 Authentication failed for %s (%s)\r\n", user, line)
					case "QUIT":
						fmt.Fprintf(conn, "221 bye\r\n")
						return
					default:
						fmt.Fprintf(conn, "501 5.5.4 what is %q\r\n", line)
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// refusingUpstream is an ACME CA behind a gateway: it serves its
// directory, then refuses newAccount with a 400 whose problem quotes the
// directory request (its query, its Basic credentials, decoded and as
// the Authorization header carried them) and the binding's
// MAC key, as a careless upstream's error might.
func (s *canaryServers) refusingUpstream(t *testing.T, macKey string) *httptest.Server {
	var (
		mu  sync.Mutex
		dir string // how the directory was asked for
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Replay-Nonce", base64.RawURLEncoding.EncodeToString([]byte(time.Now().String())))
		switch r.URL.Path {
		case "/dir":
			user, pass, _ := r.BasicAuth()
			mu.Lock()
			dir = fmt.Sprintf("GET %s (user %s, password %s, Authorization: %s)", r.RequestURI, user, pass, r.Header.Get("Authorization"))
			mu.Unlock()
			s.saw(dir)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{
				"newNonce": s.upstream + "/nonce", "newAccount": s.upstream + "/acct", "newOrder": s.upstream + "/order",
				"revokeCert": s.upstream + "/revoke", "keyChange": s.upstream + "/key"})
		case "/nonce":
			w.WriteHeader(http.StatusOK)
		default:
			mu.Lock()
			quoted := dir
			mu.Unlock()
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"type": "urn:ietf:params:acme:error:malformed",
				"detail": fmt.Sprintf("refused after %s: the binding's MAC key %s does not match", quoted, macKey)})
		}
	}))
	t.Cleanup(srv.Close)
	s.upstream = srv.URL
	return srv
}

// The operator's secrets (the PostgreSQL DSN's password, a relay's
// upstream EAB MAC key and directory credentials, EAB keys minted
// through the admin API, webhook secrets, header tokens and URL
// credentials, SMTP credentials, a script signer's env and argument
// tokens, a notify script's argument token), each a distinct canary,
// appear in no log line at any level, no admin API answer but the one
// that mints an EAB key, no CLI output, no page of the web UI, no metric,
// no row of any table (read from the database directly) and no ACME
// problem, while every one of them is used and every outside party it
// is sent to fails, quoting what it was sent. (The user names beside the
// relay's and the SMTP password are shown by design: only their use is
// checked.)
func TestNoConfiguredSecretAppearsInAnyLogLineAnswerOrStoredRow(t *testing.T) {
	dsn := pgtest.DSN(t) // skips without PostgreSQL (fails under ACMEPROXY_E2E=1)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()

	relayMACRaw := "CANARY-relay-eab-mac-raw-0042"
	canaries := map[string]string{ // environment variable → value
		"E2E_CANARY_PG_PW":        "CANARYpgpassword1001",
		"E2E_CANARY_RELAY_EAB":    base64.RawURLEncoding.EncodeToString([]byte(relayMACRaw)),
		"E2E_CANARY_RELAY_USER":   "CANARYrelayuser1002",
		"E2E_CANARY_RELAY_PW":     "CANARYrelaypassword1003",
		"E2E_CANARY_RELAY_QTOKEN": "CANARYrelayquerytoken1004",
		"E2E_CANARY_HOOK_SECRET":  "CANARYhooksecret1005",
		"E2E_CANARY_HOOK_HEADER":  "CANARYhookheadertoken1006",
		"E2E_CANARY_HOOK_USER":    "CANARYhookuser1007",
		"E2E_CANARY_HOOK_PW":      "CANARYhookpassword1008",
		"E2E_CANARY_HOOK_QTOKEN":  "CANARYhookquerytoken1009",
		"E2E_CANARY_SMTP_USER":    "CANARYsmtpuser1010",
		"E2E_CANARY_SMTP_PW":      "CANARYsmtppassword1011",
		"E2E_CANARY_SIGN_ENV":     "CANARYsignenvtoken1012",
		"E2E_CANARY_SIGN_ARG":     "CANARYsignargtoken1013",
		"E2E_CANARY_NOTIFY_ARG":   "CANARYnotifyargtoken1014",
	}
	// A user name beside a password names the account; the password is
	// its secret. The relay shows the user of a directory that has a
	// password, and the README's SMTP username is written literally:
	// these two are used and checked to reach their party, but not
	// looked for in what is shown.
	identifiers := map[string]bool{"E2E_CANARY_RELAY_USER": true, "E2E_CANARY_SMTP_USER": true}
	secrets := map[string]string{"the relay's EAB MAC key, decoded": relayMACRaw} // what → value
	// The passwords as the protocols encoded them on the wire: quoted by
	// a server, they are as good as in clear.
	encoded := map[string]string{
		"the SMTP credentials as AUTH PLAIN sent them": base64.StdEncoding.EncodeToString(
			[]byte("\x00" + canaries["E2E_CANARY_SMTP_USER"] + "\x00" + canaries["E2E_CANARY_SMTP_PW"])),
		"the relay's directory credentials as Basic sent them": base64.StdEncoding.EncodeToString(
			[]byte(canaries["E2E_CANARY_RELAY_USER"] + ":" + canaries["E2E_CANARY_RELAY_PW"])),
	}
	maps.Copy(secrets, encoded)
	for k, v := range canaries {
		t.Setenv(k, v)
		if !identifiers[k] {
			secrets[k] = v
		}
	}

	servers := &canaryServers{}
	hookRefusing, hookHangingUp := servers.refusingHook(t), servers.hangingUpHook(t)
	smtpAddr := servers.refusingSMTP(t)
	servers.refusingUpstream(t, canaries["E2E_CANARY_RELAY_EAB"])
	t.Setenv("E2E_CANARY_RELAY_DIR", fmt.Sprintf("http://%s:%s@%s/dir?token=%s",
		canaries["E2E_CANARY_RELAY_USER"], canaries["E2E_CANARY_RELAY_PW"], strings.TrimPrefix(servers.upstream, "http://"),
		canaries["E2E_CANARY_RELAY_QTOKEN"]))

	dir := t.TempDir()
	signArgs := filepath.Join(dir, "sign-args")
	signer := filepath.Join(dir, "sign.sh")
	notifier := filepath.Join(dir, "notify.sh")
	for file, body := range map[string]string{
		signer: fmt.Sprintf("#!/bin/sh\ncat >/dev/null\nprintf '%%s %%s' \"$1\" \"$SIGN_TOKEN\" > %s\n"+
			"echo \"the backend refused arg $1 and env $SIGN_TOKEN\" >&2\nexit 2\n", signArgs),
		notifier: "#!/bin/sh\ncat >/dev/null\necho \"the receiver refused token $1\" >&2\nexit 1\n",
	} {
		if err := os.WriteFile(file, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	env := newE2EEnv(t)
	env.Database = fmt.Sprintf("postgres %q", dsn+" password={env.E2E_CANARY_PG_PW}")
	debugLog := filepath.Join(env.Dir, "debug.log")
	ln := e2eListen(t)
	http01, httpPort := serveE2EHTTP01(t, ln), e2ePort(ln)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t)), srv: http01}
	profile := func(name, settings string) string {
		return fmt.Sprintf("acme_proxy {\nprofile %s\nresolvers %s\nvalidation_ports {\nhttp %d\n}\n%s\n}\n", name, env.DNSAddr, httpPort, settings)
	}
	hookURL := func(srv *httptest.Server, query string) string {
		return fmt.Sprintf("http://{env.E2E_CANARY_HOOK_USER}:{env.E2E_CANARY_HOOK_PW}@%s/acme%s", strings.TrimPrefix(srv.URL, "http://"), query)
	}
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t), Admin: b.admin,
		// Every level of every logger but Caddy's events app, whose
		// debug races with the TLS app (see e2eCaddyfile).
		GlobalExtra: fmt.Sprintf("log canary {\noutput file %s\nlevel DEBUG\nexclude events\n}", debugLog),
		AppExtra: strings.Join([]string{
			fmt.Sprintf("notify webhook %s {\nsecret {env.E2E_CANARY_HOOK_SECRET}\nheader Authorization \"Bearer {env.E2E_CANARY_HOOK_HEADER}\"\n}",
				hookURL(hookRefusing, "?token={env.E2E_CANARY_HOOK_QTOKEN}")),
			fmt.Sprintf("notify webhook %s {\nsecret {env.E2E_CANARY_HOOK_SECRET}\nheader X-Token {env.E2E_CANARY_HOOK_HEADER}\n}",
				hookURL(hookHangingUp, "")),
			fmt.Sprintf("notify email {\nsmtp %s\ntls none\nfrom acme@example.com\nto ops@example.com\nusername {env.E2E_CANARY_SMTP_USER}\npassword {env.E2E_CANARY_SMTP_PW}\n}", smtpAddr),
			fmt.Sprintf("notify script %s {env.E2E_CANARY_NOTIFY_ARG}", notifier),
		}, "\n"),
		ExtraProfiles: profile("relayed", "signer relay {\ndirectory {env.E2E_CANARY_RELAY_DIR}\neab canary-kid {env.E2E_CANARY_RELAY_EAB}\nchallenge bypass\n}") +
			profile("scripted", fmt.Sprintf("signer script {\ncommand %s {env.E2E_CANARY_SIGN_ARG}\nenv SIGN_TOKEN {env.E2E_CANARY_SIGN_ENV}\ntimeout 10s\n}", signer)) +
			profile("bound", "eab required") +
			"route /ui* {\nacme_proxy_ui {\nprefix /ui\ninsecure_no_auth\n}\n}\n",
	})
	unloadAdminOnCleanup(t)
	if got := activeApp(t).db.String(); !strings.HasPrefix(got, "postgres ") {
		t.Fatalf("the store is %q; want the PostgreSQL database", got)
	}

	seen := map[string]string{} // what the operator or a client was shown → its text
	admin := func(method, uri, body string) string {
		t.Helper()
		status, out := b.adminCall(t, method, uri, body)
		seen[fmt.Sprintf("the admin API's answer to %s %s", method, uri)] = string(out)
		if status >= 300 {
			t.Errorf("%s %s: %d %s", method, uri, status, out)
		}
		return string(out)
	}
	problem := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s succeeded; want an ACME problem", what)
			return
		}
		seen["the ACME problem of "+what] = fmt.Sprintf("%+v", err)
	}

	// An operator mints a binding key: the one answer allowed to hold
	// its MAC key.
	_, minted := b.adminCall(t, http.MethodPost, "/acme_proxy/eab/create", `{"profile": "bound", "label": "canary"}`)
	var key operator.MintedEABKey
	if err := json.Unmarshal(minted, &key); err != nil || key.HMACKey == "" {
		t.Fatalf("minting an EAB key: %v %s", err, minted)
	}
	secrets["the minted EAB MAC key"] = key.HMACKey
	mac, err := base64.RawURLEncoding.DecodeString(key.HMACKey)
	if err != nil {
		t.Fatal(err)
	}
	boundDir := env.directoryURL("bound")
	// A client binds with the kid and a wrong MAC key, then with the
	// right one.
	wrong := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: boundDir}
	_, err = wrong.Register(ctx, &xacme.Account{ExternalAccountBinding: &xacme.ExternalAccountBinding{KID: key.KID, Key: []byte("not-the-mac-key-0123456789abcdef")}}, xacme.AcceptTOS)
	problem("a binding with a wrong MAC key", err)
	right := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: boundDir}
	if _, err := right.Register(ctx, &xacme.Account{ExternalAccountBinding: &xacme.ExternalAccountBinding{KID: key.KID, Key: mac}}, xacme.AcceptTOS); err != nil {
		t.Fatalf("binding with the minted key: %v", err)
	}

	// An order relayed to the refusing upstream, and one the script
	// signer refuses, echoing its tokens on stderr.
	failOrder := func(profile, name string) string {
		t.Helper()
		c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(profile)}
		if _, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS); err != nil {
			t.Fatalf("Register on %s: %v", profile, err)
		}
		o, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(name))
		if err != nil {
			t.Fatalf("AuthorizeOrder on %s: %v", profile, err)
		}
		e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, http01, o.AuthzURLs[0]))
		if _, err := c.WaitAuthorization(ctx, o.AuthzURLs[0]); err != nil {
			t.Fatalf("WaitAuthorization on %s: %v", profile, err)
		}
		csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, e2eP256Key(t))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
		problem("the "+profile+" order", err)
		o, err = c.GetOrder(ctx, o.URI)
		if err != nil {
			t.Fatalf("GetOrder on %s: %v", profile, err)
		}
		seen["the "+profile+" order as its client reads it"] = fmt.Sprintf("%+v %+v", o, o.Error)
		return path.Base(o.URI)
	}
	relayed := failOrder("relayed", "relayed.canary.example.com")
	scripted := failOrder("scripted", "scripted.canary.example.com")

	// Every notification destination has failed at least once.
	// (A job names a webhook by its host alone: the two are told apart
	// by how they failed.)
	destinations := map[string]string{"the refusing webhook": "webhook 127.0.0.1: HTTP 503",
		"the hanging-up webhook": "webhook 127.0.0.1: EOF", "the SMTP server": "email 127.0.0.1: AUTH",
		"the notify script": "script " + notifier + ": exited with status 1"}
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(50 * time.Millisecond) {
		_, body := b.adminCall(t, http.MethodGet, "/acme_proxy/jobs?kind="+notify.Kind+"&limit=500", "")
		var jobs operator.Page[operator.JobView]
		if err := json.Unmarshal(body, &jobs); err != nil {
			t.Fatalf("the notify jobs: %v %s", err, body)
		}
		var waiting []string
		for what, where := range destinations {
			failed := false
			for _, j := range jobs.Items {
				failed = failed || strings.HasPrefix(j.LastError, where)
			}
			if !failed {
				waiting = append(waiting, what)
			}
		}
		if len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery to %s failed within %s: %s", waiting, e2eWait, body)
		}
	}
	for what, v := range encoded {
		if !servers.sawAny(v) {
			t.Errorf("no outside party was sent %s: the test does not exercise it", what)
		}
	}
	// Each secret was really used: sent where it belongs.
	for _, k := range []string{"E2E_CANARY_HOOK_HEADER", "E2E_CANARY_HOOK_USER", "E2E_CANARY_HOOK_PW", "E2E_CANARY_HOOK_QTOKEN", "E2E_CANARY_SMTP_USER",
		"E2E_CANARY_SMTP_PW", "E2E_CANARY_RELAY_USER", "E2E_CANARY_RELAY_PW", "E2E_CANARY_RELAY_QTOKEN"} {
		if !servers.sawAny(canaries[k]) {
			t.Errorf("no outside party was sent %s: the test does not exercise it", k)
		}
	}
	if got, err := os.ReadFile(signArgs); err != nil || string(got) != canaries["E2E_CANARY_SIGN_ARG"]+" "+canaries["E2E_CANARY_SIGN_ENV"] {
		t.Errorf("the script signer was run with %q (%v); want its argument and env tokens", got, err)
	}

	// What the operator reads: the admin API and the CLI's JSON.
	var jobs operator.Page[operator.JobView]
	if err := json.Unmarshal([]byte(admin(http.MethodGet, "/acme_proxy/jobs?limit=500", "")), &jobs); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		admin(http.MethodGet, fmt.Sprintf("/acme_proxy/jobs/%d", j.ID), "")
	}
	for _, uri := range []string{"/acme_proxy/profiles", "/acme_proxy/audit?limit=500", "/acme_proxy/accounts?limit=500",
		"/acme_proxy/orders?limit=500", "/acme_proxy/orders/" + relayed, "/acme_proxy/orders/" + scripted,
		"/acme_proxy/eab?profile=bound", "/config/"} {
		admin(http.MethodGet, uri, "")
	}
	for _, args := range [][]string{{"jobs", "--limit", "500"}, {"audit", "--limit", "500"}, {"eab", "list", "--profile", "bound"},
		{"orders", "show", relayed}, {"orders", "show", scripted}, {"profiles"}} {
		out, err := b.cliRun(append(args, "--json")...)
		if err != nil {
			t.Errorf("caddy acme-proxy %s: %v", strings.Join(args, " "), err)
		}
		seen["the CLI's caddy acme-proxy "+strings.Join(args, " ")] = out
	}
	// What the operator's browser is shown: the web page's every list,
	// and each order, account and job it links to.
	ui := func(rel string) string {
		t.Helper()
		u := fmt.Sprintf("https://127.0.0.1:%d/ui/%s", env.HTTPSPort, rel)
		resp, err := env.client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		page, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %v\n%s", u, resp.StatusCode, err, page)
		}
		seen["the web page "+u] = string(page)
		return string(page)
	}
	var accounts operator.Page[operator.AccountView]
	if err := json.Unmarshal([]byte(admin(http.MethodGet, "/acme_proxy/accounts?limit=500", "")), &accounts); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"", "orders", "accounts", "jobs", "audit", "orders/" + relayed, "orders/" + scripted} {
		ui(rel)
	}
	for _, a := range accounts.Items {
		ui("accounts/" + a.ID)
	}
	for _, j := range jobs.Items {
		ui(fmt.Sprintf("jobs/%d", j.ID))
	}
	// What a monitoring system scrapes.
	status, metrics := b.adminCall(t, http.MethodGet, "/metrics", "")
	if status != http.StatusOK || !strings.Contains(string(metrics), "caddy_acme_proxy_") {
		t.Errorf("GET /metrics: %d, without the proxy's metrics", status)
	}
	seen["the metrics"] = string(metrics)
	// What the database keeps, every row of every table, read directly:
	// a column no answer shows (a relay order's detail, an order's
	// failure detail, a job's payload) is stored all the same.
	for what, text := range storedRows(t, dsn+" password="+canaries["E2E_CANARY_PG_PW"]) {
		seen[what] = text
	}

	for _, file := range []string{env.LogFile, debugLog} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if file == debugLog && !strings.Contains(string(data), `"level":"debug"`) {
			t.Errorf("%s holds no debug line: the test does not read every level", file)
		}
		for i, line := range strings.Split(string(data), "\n") {
			seen[fmt.Sprintf("line %d of %s", i+1, filepath.Base(file))] = line
		}
	}

	for what, text := range seen {
		for name, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds the secret %s:\n%s", what, name, text)
			}
		}
	}
}

// storedRows is every row of every table of the database at dsn, as text
// (a bytea column's printable bytes as they are), by table and row.
func storedRows(t *testing.T, dsn string) map[string]string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string][]string{} // table → the expressions of its columns as text
	for rows.Next() {
		var table, col, typ string
		if err := rows.Scan(&table, &col, &typ); err != nil {
			t.Fatal(err)
		}
		expr := fmt.Sprintf("%q::text", col)
		if typ == "bytea" {
			expr = fmt.Sprintf("encode(%q, 'escape')", col)
		}
		cols[table] = append(cols[table], expr)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jobs", "orders", "relay_orders", "audit_events"} {
		if cols[want] == nil {
			t.Errorf("the database has no table %s (it has %d): the test reads the wrong one", want, len(cols))
		}
	}
	out := map[string]string{}
	for table, exprs := range cols {
		rows, err := db.QueryContext(t.Context(), fmt.Sprintf("SELECT concat_ws(' | ', %s) FROM %q", strings.Join(exprs, ", "), table))
		if err != nil {
			t.Fatalf("reading %s: %v", table, err)
		}
		for i := 1; rows.Next(); i++ {
			var text string
			if err := rows.Scan(&text); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("row %d of the %s table", i, table)] = text
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}
