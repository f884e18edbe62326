//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	xacme "golang.org/x/crypto/acme"
	_ "modernc.org/sqlite" // the "sqlite" driver, to check the file from outside the store

	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// crashCaddyfile is one Caddy on its default store (no database line: a
// SQLite file in Caddy's data directory), serving two profiles on
// https://ca.example.com:<port>: internal, whose local CA answers
// finalize valid, and scripted, whose script signer answers processing
// and signs from a durable job. %[1]d is the admin port, %[2]d/%[3]d the
// HTTPS/HTTP ports, %[4]s/%[5]s the site's certificate and key, %[6]s/%[7]s
// the local CA's, %[8]s the test DNS server, %[9]s the script and %[10]s
// its CA directory.
const crashCaddyfile = `{
	admin 127.0.0.1:%[1]d
	persist_config off
	skip_install_trust
	storage_clean_interval off
	auto_https disable_redirects
	default_bind 127.0.0.1
	https_port %[2]d
	http_port %[3]d
}

https://` + fleetHost + ` {
	tls %[4]s %[5]s
	acme_proxy {
		profile internal
		challenges dns-01
		resolvers %[8]s
		signer local_ca {
			cert %[6]s
			key  %[7]s
		}
	}
	acme_proxy {
		profile scripted
		challenges dns-01
		resolvers %[8]s
		signer script {
			command %[9]s
			timeout 30s
			env CA_DIR %[10]s
		}
	}
}
`

// errBadChain marks an issued chain that does not check out.
var errBadChain = errors.New("a bad chain")

// crashScript wraps the example script signer (%s) with a second's wait,
// so that scripted orders spend most of their life processing and a kill
// finds some there.
const crashScript = "#!/bin/sh\nsleep 1\nexec %s\n"

// The state machines' order (RFC 8555 §7.1.6), for "no earlier than":
// invalid is off the line, and so are an authorization's other ends.
var (
	orderRank = map[string]int{"pending": 0, "ready": 1, "processing": 2, "valid": 3}
	authzRank = map[string]int{"pending": 0, "valid": 1}
	challRank = map[string]int{"pending": 0, "processing": 1, "valid": 2}
)

// notEarlier says what is wrong when a resource last seen seen is now got.
func notEarlier(rank map[string]int, seen, got string) error {
	if seen == got {
		return nil
	}
	rs, okS := rank[seen]
	rg, okG := rank[got]
	if !okS || !okG || rg < rs {
		return fmt.Errorf("it is %s after the restart; the client was told %s", got, seen)
	}
	return nil
}

// crashOrder is what a client was told of one order.
type crashOrder struct {
	profile    string
	status     string // the last status it was told
	toldStates []string
	// finalizing: a finalize was sent and no answer came back.
	finalizing bool
	finalized  bool // a finalize was sent at all
}

func (o *crashOrder) told(st string) bool { return slices.Contains(o.toldStates, st) }

// crashRecorder is a client's transport that records every answer the
// server gave it: accounts, orders with their status, authorizations and
// challenges with theirs, certificates with their bytes, and the signed
// requests it answered.
type crashRecorder struct {
	next    http.RoundTripper
	profile string
	mu      sync.Mutex
	account string
	orders  map[string]*crashOrder
	authzs  map[string]string
	challs  map[string]string
	certs   map[string][]byte
	// answered is the last signed request the server answered 2xx: its
	// nonce is spent.
	answered struct {
		url   string
		body  []byte
		nonce string
	}
}

func newCrashRecorder(next http.RoundTripper, profile string) *crashRecorder {
	return &crashRecorder{next: next, profile: profile, orders: map[string]*crashOrder{},
		authzs: map[string]string{}, challs: map[string]string{}, certs: map[string][]byte{}}
}

// resource names the kind of an ACME URL by its path: "order", "finalize",
// "authz", "chall", "cert", "account", "new-order", …
func resource(u *url.URL) string {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) >= 2 && parts[len(parts)-1] == "finalize" {
		return "finalize"
	}
	if len(parts) >= 2 {
		if k := parts[len(parts)-2]; k == "order" || k == "authz" || k == "chall" || k == "cert" || k == "account" {
			return k
		}
	}
	return parts[len(parts)-1]
}

func (r *crashRecorder) order(u string) *crashOrder {
	o := r.orders[u]
	if o == nil {
		o = &crashOrder{profile: r.profile}
		r.orders[u] = o
	}
	return o
}

func (r *crashRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	kind := resource(req.URL)
	orderURL := strings.TrimSuffix(req.URL.String(), "/finalize")
	if kind == "finalize" {
		r.mu.Lock()
		o := r.order(orderURL)
		o.finalizing, o.finalized = true, true
		r.mu.Unlock()
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// Cut short: the client hears an error, and nothing was told.
		return resp, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if kind == "finalize" {
		r.order(orderURL).finalizing = false
	}
	if resp.StatusCode/100 != 2 {
		return resp, nil
	}
	if req.Method == http.MethodPost {
		r.answered.url, r.answered.body, r.answered.nonce = req.URL.String(), reqBody, jwsNonce(reqBody)
	}
	var v struct {
		Status     string `json:"status"`
		Finalize   string `json:"finalize"`
		Challenges []struct {
			URL    string `json:"url"`
			Status string `json:"status"`
		} `json:"challenges"`
	}
	if kind == "cert" {
		r.certs[req.URL.String()] = body
		return resp, nil
	}
	if json.Unmarshal(body, &v) != nil {
		return resp, nil
	}
	switch kind {
	case "new-account", "account":
		if loc := resp.Header.Get("Location"); loc != "" {
			r.account = loc
		}
	case "new-order", "order", "finalize":
		u := orderURL
		if loc := resp.Header.Get("Location"); kind == "new-order" && loc != "" {
			u = loc
		}
		o := r.order(u)
		o.status = v.Status
		o.toldStates = append(o.toldStates, v.Status)
	case "authz":
		r.authzs[req.URL.String()] = v.Status
		for _, ch := range v.Challenges {
			r.challs[ch.URL] = ch.Status
		}
	case "chall":
		r.challs[req.URL.String()] = v.Status
	}
	return resp, nil
}

// jwsNonce is the nonce in a flattened JWS's protected header.
func jwsNonce(body []byte) string {
	var jws struct {
		Protected string `json:"protected"`
	}
	var h struct {
		Nonce string `json:"nonce"`
	}
	if json.Unmarshal(body, &jws) != nil {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(jws.Protected)
	if err != nil || json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Nonce
}

// counts summarizes the recorders: orders by last status told, and how
// many had a finalize in flight.
func crashCounts(recs []*crashRecorder) (byStatus map[string]int, finalizing int) {
	byStatus = map[string]int{}
	for _, r := range recs {
		r.mu.Lock()
		for _, o := range r.orders {
			byStatus[o.profile+" "+o.status]++
			if o.finalizing {
				finalizing++
			}
		}
		r.mu.Unlock()
	}
	return byStatus, finalizing
}

// staleNonces hands its client, in place of the first nonce the server
// gives it, one that was spent before the crash; it counts the badNonce
// answers it passes on.
type staleNonces struct {
	next     http.RoundTripper
	mu       sync.Mutex
	stale    string // "" once handed over
	badNonce atomic.Int64
}

func (s *staleNonces) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusBadRequest && resp.Header.Get("Content-Type") == "application/problem+json" {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte("urn:ietf:params:acme:error:badNonce")) {
			s.badNonce.Add(1)
		}
	}
	s.mu.Lock()
	if s.stale != "" && resp.Header.Get("Replay-Nonce") != "" {
		resp.Header.Set("Replay-Nonce", s.stale)
		s.stale = ""
	}
	s.mu.Unlock()
	return resp, nil
}

// TestCaddyOnSQLiteKilledMidLoadKeepsEveryAnswerItGaveAndFinishesWhatItWasProcessing
// runs one built Caddy on its default SQLite store, has several
// x/crypto/acme clients issue from a local CA profile and a script signer
// profile at once, kills the process group with SIGKILL at a seeded random
// moment while orders are processing, starts the same binary on the same
// data directory and config, and holds the server to every answer it gave
// before dying (README, Durability): accounts, orders no earlier in their
// state machine, authorizations and challenges likewise, certificates byte
// for byte; orders told processing finish without the client finalizing
// again; a nonce spent before the crash is refused, the clients go on
// issuing; and the SQLite file passes integrity_check.
//
// ACMEPROXY_CRASH_SEED=<n> repeats a run's choice of moment.
func TestCaddyOnSQLiteKilledMidLoadKeepsEveryAnswerItGaveAndFinishesWhatItWasProcessing(t *testing.T) {
	for _, tool := range []string{"bash", "openssl", "jq", "flock"} {
		needTool(t, tool, "the example script signer runs it")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ACMEPROXY_CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ACMEPROXY_CRASH_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (ACMEPROXY_CRASH_SEED=%d repeats the choice of moment)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	dir := t.TempDir()
	d, err := testdns.Start(fleetZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	f := &fleet{dns: d, port: freePort(t), httpPort: freePort(t)}
	in := &fleetInstance{name: "caddy", ip: "127.0.0.1", adminPort: freePort(t)}
	f.makeCA(t, dir)

	example, err := filepath.Abs("../examples/script-signer/openssl-ca.sh")
	if err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(dir, "script-ca")
	if out, err := exec.Command(example, "init", caDir).CombinedOutput(); err != nil {
		t.Fatalf("openssl-ca.sh init: %v\n%s", err, out)
	}
	scriptCA, err := readCerts(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	scriptRoots := x509.NewCertPool()
	scriptRoots.AddCert(scriptCA[0])
	script := filepath.Join(dir, "slow-openssl-ca.sh")
	if err := os.WriteFile(script, fmt.Appendf(nil, crashScript, example), 0o700); err != nil {
		t.Fatal(err)
	}
	roots := map[string]*x509.CertPool{"internal": f.caPool, "scripted": scriptRoots}

	bin := buildCaddy(t)
	home := filepath.Join(dir, "home")
	env := []string{"HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CONFIG_HOME=" + home}
	config := fmt.Sprintf(crashCaddyfile, in.adminPort, f.port, f.httpPort, f.siteCert, f.siteKey,
		f.caCert, f.caKey, d.Addr, script, caDir)
	start := func() *caddyProc {
		p := startCaddy(t, bin, config, env)
		for _, profile := range []string{"internal", "scripted"} {
			waitHTTP(t, p, f.pinned(in), f.directory(profile), http.StatusOK)
		}
		return p
	}
	proc := start()
	dbFile := filepath.Join(home, "caddy", "acme_proxy", "acme_proxy.db")
	if _, err := os.Stat(dbFile); err != nil {
		t.Fatalf("the default store is not where the README says: %v", err)
	}

	// The load: clients per profile, each issuing one name after another
	// until the kill; any failure before it is the test's.
	const perProfile = 3
	type crashClient struct {
		c   *xacme.Client
		rec *crashRecorder
	}
	var clients []crashClient
	var recs []*crashRecorder
	for _, profile := range []string{"internal", "scripted"} {
		for range perProfile {
			rec := newCrashRecorder(f.transport(in), profile)
			c, _ := f.client(t, rec, profile)
			clients = append(clients, crashClient{c, rec})
			recs = append(recs, rec)
		}
	}
	issue := func(ctx context.Context, c *xacme.Client, profile, name string) ([][]byte, error) {
		chain, err := f.issue(ctx, t, c, name)
		if err != nil {
			return nil, err
		}
		if _, err := checkChain(chain, roots[profile], name); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadChain, err)
		}
		return chain, nil
	}
	var (
		killed   atomic.Bool
		issued   [2]atomic.Int64
		loadErrs = make(chan error, len(clients))
		wg       sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	for i, cc := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				name := fmt.Sprintf("%s-%d-%d.example.com", cc.rec.profile, i, j)
				_, err := issue(loadCtx, cc.c, cc.rec.profile, name)
				if err != nil && (!killed.Load() || answered(err)) {
					loadErrs <- fmt.Errorf("%s: %w", name, err)
					return
				}
				if killed.Load() {
					return
				}
				issued[i/perProfile].Add(1)
			}
		}()
	}

	// The moment: once each profile has issued a few (seeded), a seeded
	// wait, then the first instant at which a client has been told an
	// order is processing and not yet how it ended, and another has sent a
	// finalize not yet answered.
	minIssued := int64(2 + rng.IntN(4))
	wait := time.Duration(rng.IntN(1500)) * time.Millisecond
	t.Logf("killing after %d issued per profile, %s, and at an order told processing and a finalize in flight", minIssued, wait)
	deadline := time.Now().Add(45 * time.Second)
	inFlight := func() bool {
		var processing, finalizing bool
		for _, r := range recs {
			r.mu.Lock()
			for _, o := range r.orders {
				processing = processing || o.status == "processing"
				finalizing = finalizing || (o.finalizing && !o.told("processing"))
			}
			r.mu.Unlock()
		}
		return processing && finalizing
	}
	for phase := 0; phase < 2; {
		select {
		case err := <-loadErrs:
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			by, fin := crashCounts(recs)
			t.Fatalf("the load did not reach the moment to kill within 45s (phase %d; orders %v, %d finalizing)", phase, by, fin)
		}
		switch phase {
		case 0:
			if issued[0].Load() >= minIssued && issued[1].Load() >= minIssued {
				phase++
				time.Sleep(wait)
				continue
			}
		case 1:
			if inFlight() {
				phase++
				continue
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	killed.Store(true)
	if err := syscall.Kill(-proc.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9: %v", err)
	}
	<-proc.exited
	killedAt := time.Now()
	stopLoad()
	wg.Wait()
	close(loadErrs)
	for err := range loadErrs {
		t.Error(err)
	}
	by, finalizing := crashCounts(recs)
	t.Logf("killed with orders (by last status told) %v, %d with a finalize unanswered; issued %d internal, %d scripted",
		by, finalizing, issued[0].Load(), issued[1].Load())

	proc = start()
	t.Logf("restarted %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	hc := f.pinned(in)
	nonceURL := func(r *crashRecorder) string { return f.newNonceURL(r.profile) }
	get := func(cc crashClient, u string) (answer, error) {
		return postAsGet(hc, cc.c.Key, cc.rec.account, nonceURL(cc.rec), u)
	}

	type orderView struct {
		Status      string          `json:"status"`
		Error       json.RawMessage `json:"error"`
		Certificate string          `json:"certificate"`
	}
	readOrder := func(cc crashClient, u string) (orderView, answer, error) {
		var v orderView
		a, err := get(cc, u)
		if err != nil {
			return v, a, err
		}
		if a.status != http.StatusOK {
			return v, a, fmt.Errorf("%v", a)
		}
		if err := json.Unmarshal([]byte(a.body), &v); err != nil {
			return v, a, fmt.Errorf("%w: %v", err, a)
		}
		return v, a, nil
	}

	t.Run("every account, order, authorization, challenge and certificate a client was told of is there, no earlier", func(t *testing.T) {
		var orders, authzs, challs, certs int
		defer func() {
			t.Logf("checked %d accounts, %d orders, %d authorizations, %d challenges, %d certificates", len(clients), orders, authzs, challs, certs)
		}()
		for _, cc := range clients {
			r := cc.rec
			orders, authzs, challs, certs = orders+len(r.orders), authzs+len(r.authzs), challs+len(r.challs), certs+len(r.certs)
			if a, err := get(cc, r.account); err != nil || a.status != http.StatusOK || !strings.Contains(a.body, `"valid"`) {
				t.Errorf("account %s: %v %v", r.account, a, err)
			}
			for u, o := range r.orders {
				if o.status == "" {
					continue // a finalize with no answer, of an order told nothing since
				}
				v, a, err := readOrder(cc, u)
				if err != nil {
					t.Errorf("order %s: %v", u, err)
					continue
				}
				st := v.Status
				if st == "invalid" && o.status != "invalid" && (o.finalizing || o.told("processing")) {
					continue // an issuance may fail, stated and audited: the next subtest
				}
				if err := notEarlier(orderRank, o.status, st); err != nil {
					t.Errorf("order %s (%s): %v: %v", u, r.profile, err, a)
				}
			}
			for u, seen := range r.authzs {
				a, err := get(cc, u)
				var v struct{ Status string }
				if err == nil {
					err = json.Unmarshal([]byte(a.body), &v)
				}
				if err != nil || a.status != http.StatusOK {
					t.Errorf("authorization %s: %v %v", u, a, err)
					continue
				}
				if err := notEarlier(authzRank, seen, v.Status); err != nil {
					t.Errorf("authorization %s: %v", u, err)
				}
			}
			for u, seen := range r.challs {
				a, err := get(cc, u)
				var v struct{ Status string }
				if err == nil {
					err = json.Unmarshal([]byte(a.body), &v)
				}
				if err != nil || a.status != http.StatusOK {
					t.Errorf("challenge %s: %v %v", u, a, err)
					continue
				}
				if err := notEarlier(challRank, seen, v.Status); err != nil {
					t.Errorf("challenge %s: %v", u, err)
				}
			}
			for u, before := range r.certs {
				a, err := get(cc, u)
				if err != nil || a.status != http.StatusOK {
					t.Errorf("certificate %s: %v %v", u, a, err)
					continue
				}
				if !slices.Equal(pemDERs(before), pemDERs([]byte(a.body))) || len(pemDERs(before)) == 0 {
					t.Errorf("certificate %s is not the chain the client was given before the crash:\nbefore:\n%s\nafter:\n%s", u, before, a.body)
				}
			}
		}
	})

	t.Run("orders told processing finish without a second finalize; so does one whose finalize went unanswered", func(t *testing.T) {
		type pendingOrder struct {
			cc  crashClient
			url string
			o   *crashOrder
		}
		var waiting []pendingOrder
		for _, cc := range clients {
			for u, o := range cc.rec.orders {
				if o.status != "valid" && o.status != "invalid" && (o.told("processing") || o.finalizing) {
					waiting = append(waiting, pendingOrder{cc, u, o})
				}
			}
		}
		t.Logf("%d orders told processing or with a finalize unanswered", len(waiting))
		// A job the dead process held is taken over once its lease (a
		// minute from its claim or last renewal, before the kill) lapses.
		deadline := killedAt.Add(75 * time.Second)
		outcomes := map[string]int{}
		defer func() { t.Logf("their outcomes: %v", outcomes) }()
		for _, w := range waiting {
			for {
				v, a, err := readOrder(w.cc, w.url)
				if err != nil {
					t.Errorf("order %s: %v", w.url, err)
					break
				}
				st := v.Status
				told := w.o.told("processing")
				name := orderName(a.body)
				if st != "processing" || !time.Now().Before(deadline) {
					outcomes[fmt.Sprintf("%s, told processing %v: %s", w.o.profile, told, st)]++
				}
				switch {
				case st == "valid":
					cert := v.Certificate
					ca, err := get(w.cc, cert)
					if err != nil || ca.status != http.StatusOK {
						t.Errorf("order %s is valid; its certificate %s: %v %v", w.url, cert, ca, err)
						break
					}
					var chain [][]byte
					for _, der := range pemDERs([]byte(ca.body)) {
						chain = append(chain, []byte(der))
					}
					if _, err := checkChain(chain, roots[w.o.profile], name); err != nil {
						t.Errorf("order %s is valid: %v", w.url, err)
					}
				case st == "invalid":
					id := w.url[strings.LastIndex(w.url, "/")+1:]
					if len(v.Error) == 0 {
						t.Errorf("order %s is invalid without a stated error: %v", w.url, a)
					}
					if n := auditRows(t, in.adminPort, "certificate_issue_failed", id); n == 0 {
						t.Errorf("order %s is invalid with no certificate_issue_failed audit row", w.url)
					}
				case st == "ready" && !told:
					// The finalize claim is written without an fsync of its
					// own, after which the client was told nothing: finalizing
					// again is all it takes (README, Durability).
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					o, err := w.cc.c.WaitOrder(ctx, w.url)
					var chain [][]byte
					if err == nil {
						chain, _, err = w.cc.c.CreateOrderCert(ctx, o.FinalizeURL, csrFor(t, name), true)
					}
					cancel()
					if err == nil {
						_, err = checkChain(chain, roots[w.o.profile], name)
					}
					if err != nil {
						t.Errorf("order %s, ready again after a finalize cut short, finalized again: %v", w.url, err)
					}
				case st == "processing" && time.Now().Before(deadline):
					time.Sleep(500 * time.Millisecond)
					continue
				default:
					// Claimed by the killed process, and no answer left: the
					// restarted one resumes it at once (its claimer has
					// exited), not 5 minutes after the claim.
					t.Errorf("order %s (%s, told %v) is %s %s after the restart: %v", w.url, w.o.profile, w.o.toldStates, st, time.Since(killedAt).Round(time.Second), a)
				}
				break
			}
		}
	})

	t.Run("a signed request answered before the crash is refused after it as a replay", func(t *testing.T) {
		for _, cc := range clients {
			r := cc.rec
			if r.answered.nonce == "" {
				t.Errorf("client of %s: no signed request recorded", r.account)
				continue
			}
			req, _ := http.NewRequest(http.MethodPost, r.answered.url, bytes.NewReader(r.answered.body))
			req.Header.Set("Content-Type", "application/jose+json")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte("urn:ietf:params:acme:error:badNonce")) {
				t.Errorf("replaying POST %s: %s %s; want 400 badNonce", r.answered.url, resp.Status, body)
			}
			if resp.Header.Get("Replay-Nonce") == "" {
				t.Errorf("the badNonce answer carries no fresh nonce")
			}
		}
	})

	t.Run("every client goes on issuing, retrying the badNonce of a nonce spent before the crash", func(t *testing.T) {
		var wg sync.WaitGroup
		for i, cc := range clients {
			stale := &staleNonces{next: f.transport(in), stale: cc.rec.answered.nonce}
			cc.c.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: stale}
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("%s-after-%d.example.com", cc.rec.profile, i)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				if _, err := issue(ctx, cc.c, cc.rec.profile, name); err != nil {
					t.Errorf("%s after the restart: %v", name, err)
				}
				if stale.badNonce.Load() == 0 {
					t.Errorf("%s: the nonce spent before the crash was not refused with badNonce", name)
				}
			}()
		}
		wg.Wait()
	})

	// Stopped (SIGINT: Caddy's graceful stop), the file is checked read-only.
	if err := syscall.Kill(proc.pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("caddy did not stop within 30s of SIGINT")
	}
	db, err := sql.Open("sqlite", "file:"+dbFile+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var result string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&result); err != nil || result != "ok" {
		t.Errorf("PRAGMA integrity_check: %q %v", result, err)
	}
}

// answered reports whether err is the server's answer (a problem document,
// an order or authorization it made invalid) or a certificate that does
// not verify, rather than a request the kill cut short.
func answered(err error) bool {
	var (
		prob  *xacme.Error
		order *xacme.OrderError
		authz *xacme.AuthorizationError
	)
	return errors.As(err, &prob) || errors.As(err, &order) || errors.As(err, &authz) || errors.Is(err, errBadChain)
}

// pemDERs is the DER of every certificate in a PEM chain, in order.
func pemDERs(chain []byte) []string {
	var out []string
	for {
		var b *pem.Block
		b, chain = pem.Decode(chain)
		if b == nil {
			return out
		}
		out = append(out, string(b.Bytes))
	}
}

// orderName is the first identifier of an order object.
func orderName(body string) string {
	var v struct {
		Identifiers []struct{ Value string } `json:"identifiers"`
	}
	_ = json.Unmarshal([]byte(body), &v)
	if len(v.Identifiers) == 0 {
		return ""
	}
	return v.Identifiers[0].Value
}

// auditRows counts the audit rows of event for order, through the admin
// API on adminPort.
func auditRows(t *testing.T, adminPort int, event, order string) int {
	t.Helper()
	u := fmt.Sprintf("http://127.0.0.1:%d/acme_proxy/audit?event=%s&order=%s", adminPort, event, url.QueryEscape(order))
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Host = fmt.Sprintf("localhost:%d", adminPort)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", u, err)
		return 0
	}
	defer resp.Body.Close()
	var p struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s %v", u, resp.Status, err)
	}
	return len(p.Items)
}
