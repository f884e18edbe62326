package script

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/internal/signertest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// fakeSettler records what the signer reports.
type fakeSettler struct {
	mu      sync.Mutex
	issued  map[string][][]byte
	failed  map[string]string
	refused map[string]refusedAs
	// issuedErr, while set, is what Issued answers, recording nothing.
	issuedErr error
}

type refusedAs struct {
	kind   signer.Kind
	detail string
}

func (f *fakeSettler) Issued(_ context.Context, id string, chain [][]byte, _ ...[][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.issuedErr != nil {
		return f.issuedErr
	}
	f.issued[id] = chain
	return nil
}

func (f *fakeSettler) Failed(_ context.Context, id, detail string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed[id] = detail
	return nil
}

func (f *fakeSettler) Refused(_ context.Context, id string, refusal *signer.Error, detail string) error {
	kind := refusal.Kind
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused[id] = refusedAs{kind, detail}
	return nil
}

// bench is a bound script signer over a real store.
type bench struct {
	db      *store.DB
	queue   *jobs.Queue
	clock   *clocktest.Fake
	settler *fakeSettler
	s       *Signer
}

func newBench(t *testing.T, opts Options) *bench {
	t.Helper()
	return newBenchLogging(t, opts, zap.NewNop())
}

// newBenchLogging is newBench with the signer logging to log.
func newBenchLogging(t *testing.T, opts Options, log *zap.Logger) *bench {
	t.Helper()
	return newBenchBound(t, opts, func(b *signer.Binding) { b.Logger = log })
}

// newBenchBound is newBench with its binding changed by bind before the
// signer gets it.
func newBenchBound(t *testing.T, opts Options, bind func(*signer.Binding)) *bench {
	t.Helper()
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clk := clocktest.New(time.Now())
	b := &bench{db: db, queue: jobs.NewQueue(db, clk), clock: clk,
		settler: &fakeSettler{issued: map[string][][]byte{}, failed: map[string]string{}, refused: map[string]refusedAs{}}}
	opts.Clock = clk
	if b.s, err = New(opts); err != nil {
		t.Fatal(err)
	}
	binding := signer.Binding{Profile: "p", Settler: b.settler, Queue: b.queue, DB: db, Logger: zap.NewNop()}
	bind(&binding)
	if err := b.s.Bind(binding); err != nil {
		t.Fatal(err)
	}
	return b
}

// finalized creates an order for name claimed for issue, as finalize
// hands it over, and returns the signer's request and the CSR's key.
func (b *bench) finalized(t *testing.T, name string) (signer.IssueRequest, *ecdsa.PrivateKey) {
	t.Helper()
	return signertest.Finalized(t, b.db, b.clock.Now(), name, nil)
}

// job returns the live script_issue job of an order.
func (b *bench) job(t *testing.T, orderID string) *jobs.Job {
	t.Helper()
	js, err := b.queue.List(context.Background(), store.JobFilter{Kind: IssueKind, Key: orderID})
	if err != nil || len(js) != 1 {
		t.Fatalf("script jobs of %s: %d (%v); want 1", orderID, len(js), err)
	}
	return &js[0]
}

func TestIssueQueuesOneJobUntilTheOrderExpiresHoweverOftenItIsCalled(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, Options{Command: []string{"/bin/true"}})
	req, _ := b.finalized(t, "a.example.com")
	for range 3 {
		out, err := b.s.Issue(ctx, req)
		if err != nil || !out.Pending || len(out.Chain) != 0 {
			t.Fatalf("issue: %+v %v; want pending", out, err)
		}
	}
	j := b.job(t, req.OrderID)
	o, err := b.db.GetOrder(ctx, "p", req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Deadline.Equal(o.Expires) || j.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("job deadline %v, %d attempts; want the order's expiry %v, %d", j.Deadline, j.MaxAttempts, o.Expires, DefaultMaxAttempts)
	}
}

func TestTheProgramReadsTheIssueRequestAsTheContractSays(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	in := filepath.Join(dir, "stdin.json")
	b := newBench(t, Options{Command: []string{program(t, "cat > "+in+"\nexit 75")}})
	req, _ := b.finalized(t, "a.example.com")
	req.NotAfter = time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)); out.Kind() != "retry_after" {
		t.Fatalf("outcome %s; want retry_after for exit 75", out)
	}
	raw, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("stdin is not one JSON object: %v\n%s", err, raw)
	}
	o, err := b.db.GetOrder(ctx, "p", req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"version": 1.0, "operation": "issue", "profile": "p", "order_id": req.OrderID, "account_id": o.AccountID,
		"identifiers": []any{map[string]any{"type": "dns", "value": "a.example.com"}},
		"csr":         base64.RawURLEncoding.EncodeToString(req.CSRDER),
		"not_before":  nil, "not_after": "2027-01-02T03:04:05Z", "certificate_profile": nil, "client_addr": "10.1.2.3",
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("stdin:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}
}

func TestEachWayTheProgramEndsHasItsOutcome(t *testing.T) {
	ca := newTestCA(t)
	tests := []struct {
		name string
		// body is the program; CHAIN in it is replaced by a file holding
		// a chain for the order's key and name, WRONG by one for another
		// key, OTHER by one for the order's key and another name.
		body       string
		timeout    time.Duration
		outcome    string // the job outcome's kind
		reason     string // in the outcome, for a retry
		issued     bool
		refused    signer.Kind
		refusedWhy string
		// dates: the client asked for a notAfter in its newOrder.
		dates bool
	}{
		{name: "exit 0 with the chain", body: "cat CHAIN", outcome: "done", issued: true},
		{name: "exit 0 with garbage", body: "echo signed", outcome: "retry", reason: "exited 0 but its output is not the order's certificate: output holds something other than PEM certificates"},
		{name: "exit 0 with a chain for the wrong key fails the order at once", body: "cat WRONG", outcome: "failed",
			reason: "exited 0 with a certificate that is not the order's: the leaf certifies another key than the CSR's"},
		{name: "exit 0 with a chain for other names fails the order at once", body: "cat OTHER", outcome: "failed",
			reason: "exited 0 with a certificate that is not the order's: the leaf names dns:b.example.com; the order is for dns:a.example.com"},
		{name: "exit 0 with oversized output", body: "cat CHAIN; head -c 2000000 /dev/zero", outcome: "retry", reason: "wrote more than 1048576 bytes on stdout"},
		{name: "exit 2 refusing a name", body: "echo 'rejectedIdentifier: a.example.com is not ours' >&2; exit 2", outcome: "done",
			refused: signer.KindRejectedIdentifier, refusedWhy: "refused the request: a.example.com is not ours"},
		{name: "exit 2 refusing the dates the client asked for", body: "echo 'badValidity: at most 90 days' >&2; exit 2", outcome: "done",
			refused: signer.KindBadValidity, refusedWhy: "refused the request: at most 90 days", dates: true},
		{name: "exit 2 refusing dates the client did not ask for fails as the program's fault", body: "echo 'badValidity: at most 90 days' >&2; exit 2",
			outcome: "failed", reason: "refused validity dates the order did not ask for: at most 90 days"},
		{name: "exit 2 refusing the CSR", body: "echo 'RSA keys only' >&2; exit 2", outcome: "done",
			refused: signer.KindBadCSR, refusedWhy: "refused the request: RSA keys only"},
		{name: "exit 75", body: "echo 'the HSM is busy' >&2; exit 75", outcome: "retry_after", reason: "failed temporarily: exited with status 75: the HSM is busy"},
		{name: "exit 1", body: "echo 'openssl: unable to load CA key' >&2; exit 1", outcome: "retry", reason: "exited with status 1: openssl: unable to load CA key"},
		{name: "a signal", body: "kill -KILL $$", outcome: "retry", reason: "was killed by signal killed"},
		{name: "the timeout", body: "sleep 1000", timeout: 200 * time.Millisecond, outcome: "retry", reason: "timed out after 200ms and was killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			body := tt.body
			// The CSR key is only known once the order exists: the
			// program reads files written below.
			body = strings.NewReplacer("CHAIN", filepath.Join(dir, "chain.pem"), "WRONG", filepath.Join(dir, "wrong.pem"),
				"OTHER", filepath.Join(dir, "other.pem")).Replace(body)
			b := newBench(t, Options{Command: []string{program(t, body)}, Timeout: tt.timeout})
			req, key := b.finalized(t, "a.example.com")
			good := ca.leaf(t, key.Public(), []string{"a.example.com"})
			os.WriteFile(filepath.Join(dir, "chain.pem"), pemOf(good, ca.inter), 0o644)
			os.WriteFile(filepath.Join(dir, "wrong.pem"), pemOf(ca.leaf(t, newKey(t).Public(), []string{"a.example.com"}), ca.inter), 0o644)
			os.WriteFile(filepath.Join(dir, "other.pem"), pemOf(ca.leaf(t, key.Public(), []string{"b.example.com"}), ca.inter), 0o644)
			if tt.dates {
				req.NotAfter = time.Now().Add(400 * 24 * time.Hour)
			}
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			out := b.s.RunJob(ctx, b.job(t, req.OrderID))
			if out.Kind() != tt.outcome || !strings.Contains(out.String(), tt.reason) {
				t.Errorf("outcome %s; want %s with %q", out, tt.outcome, tt.reason)
			}
			chain, issued := b.settler.issued[req.OrderID]
			if issued != tt.issued {
				t.Errorf("issued: %v; want %v", issued, tt.issued)
			}
			if issued && (len(chain) != 2 || !slices.Equal(chain[0], good.Raw) || !slices.Equal(chain[1], ca.inter.Raw)) {
				t.Errorf("the recorded chain is not the printed one")
			}
			r, refused := b.settler.refused[req.OrderID]
			if tt.refused == 0 && refused {
				t.Errorf("refused (%v, %q); want not", r.kind, r.detail)
			}
			if tt.refused != 0 && (r.kind != tt.refused || !strings.Contains(r.detail, tt.refusedWhy)) {
				t.Errorf("refused as %v %q; want %v with %q", r.kind, r.detail, tt.refused, tt.refusedWhy)
			}
			if f, ok := b.settler.failed[req.OrderID]; ok {
				t.Errorf("failed %q after one run; the job decides when to give up", f)
			}
		})
	}
}

func TestTemporaryFailuresWaitLongerEachTimeWithoutSpendingAttempts(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, Options{Command: []string{program(t, "exit 75")}})
	req, _ := b.finalized(t, "a.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 8 {
		out := b.s.RunJob(ctx, b.job(t, req.OrderID))
		if out.Kind() != "retry_after" {
			t.Fatalf("outcome %s; want retry_after", out)
		}
		wait, _, _ := strings.Cut(strings.TrimPrefix(out.String(), "retry after "), ":")
		got = append(got, wait)
	}
	want := []string{"15s", "30s", "1m0s", "2m0s", "4m0s", "8m0s", "10m0s", "10m0s"}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v; want %v", got, want)
	}
}

func TestAnAbandonedJobFailsTheOrderWithTheRealReasonForTheOperator(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, Options{Command: []string{"/bin/false"}})
	req, _ := b.finalized(t, "a.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.s.AbandonJob(ctx, b.job(t, req.OrderID), "attempts exhausted; last error: /bin/false exited with status 1"); err != nil {
		t.Fatal(err)
	}
	if got := b.settler.failed[req.OrderID]; got != "script signer /bin/false failed: attempts exhausted; last error: /bin/false exited with status 1" {
		t.Errorf("failed with %q", got)
	}

	// Cancelled by an operator after a failed run: the run's error is
	// still the operator's reason.
	req2, _ := b.finalized(t, "b.example.com")
	if _, err := b.s.Issue(ctx, req2); err != nil {
		t.Fatal(err)
	}
	j := b.job(t, req2.OrderID)
	j.LastError = "/bin/false exited with status 1"
	if err := b.s.AbandonJob(ctx, j, "cancelled by an operator"); err != nil {
		t.Fatal(err)
	}
	if got := b.settler.failed[req2.OrderID]; got != "script signer /bin/false failed: cancelled by an operator; last error: /bin/false exited with status 1" {
		t.Errorf("cancelled, failed with %q", got)
	}
}

func TestRevokeHandsTheCertificateToTheProgramAndFailsUnlessItExitsZero(t *testing.T) {
	ctx := context.Background()
	ca := newTestCA(t)
	leaf := ca.leaf(t, newKey(t).Public(), []string{"a.example.com"}, "10.0.0.1")
	reason := 4
	dir := t.TempDir()
	in, env := filepath.Join(dir, "stdin.json"), filepath.Join(dir, "env")
	tests := []struct {
		name    string
		body    string
		revoke  bool
		ran     bool
		wantErr string
		// refused: the error is the program's refusal, not tried again.
		refused bool
	}{
		{"exit 0 revokes", "exit 0", true, true, "", false},
		{"exit 2 is the program's refusal", "echo 'unknown serial' >&2; exit 2", true, true, "exited with status 2: unknown serial", true},
		{"exit 75 is an error tried again", "exit 75", true, true, "exited with status 75", false},
		{"exit 1 is an error tried again", "exit 1", true, true, "exited with status 1", false},
		{"revoke off does not run the program", "exit 1", false, false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(in)
			b := newBench(t, Options{Command: []string{program(t, "cat > "+in+"\n/usr/bin/env > "+env+"\n"+tt.body)}, Revoke: tt.revoke})
			err := b.s.Revoke(ctx, leaf, &reason)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Revoke: %v; want error %q", err, tt.wantErr)
			}
			if got := errors.Is(err, signer.ErrRevocationRefused); got != tt.refused {
				t.Errorf("Revoke: %v; refused = %v, want %v", err, got, tt.refused)
			}
			raw, rerr := os.ReadFile(in)
			if !tt.ran {
				if rerr == nil {
					t.Errorf("the program ran with revoke off")
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("stdin: %v\n%s", err, raw)
			}
			want := map[string]any{"version": 1.0, "operation": "revoke", "profile": "p", "order_id": "",
				"certificate": base64.RawURLEncoding.EncodeToString(leaf.Raw), "reason": 4.0}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("stdin:\n%s\nwant:\n%s", gotJSON, wantJSON)
			}
			envs, _ := os.ReadFile(env)
			for _, v := range []string{"ACME_PROXY_OPERATION=revoke\n", "ACME_PROXY_IDENTIFIERS=a.example.com,10.0.0.1\n", "ACME_PROXY_PROFILE=p\n"} {
				if !strings.Contains(string(envs), v) {
					t.Errorf("the program's environment lacks %q:\n%s", v, envs)
				}
			}
		})
	}
}

func TestABadConfigurationFailsAtLoadNamingTheKey(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "sign.sh")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no command", Options{}, "signer.command: required"},
		{"a relative command", Options{Command: []string{"bin/sign", "--flag"}}, `signer.command: "bin/sign" must be an absolute path`},
		{"a command looked up in PATH", Options{Command: []string{"openssl"}}, `signer.command: "openssl" must be an absolute path`},
		{"a missing command", Options{Command: []string{"/nonexistent/sign-cert"}}, "signer.command: stat /nonexistent/sign-cert: no such file or directory"},
		{"a command that is not executable", Options{Command: []string{notExec}}, "signer.command: " + notExec + " is not an executable file"},
		{"a directory", Options{Command: []string{"/tmp"}}, "signer.command: /tmp is not an executable file"},
		{"a negative timeout", Options{Command: []string{"/bin/true"}, Timeout: -time.Second}, "signer.timeout: must be positive"},
		{"a variable name with =", Options{Command: []string{"/bin/true"}, Env: map[string]string{"A=B": "c"}}, `signer.env: "A=B" is not a valid environment variable`},
		{"a variable of the proxy's", Options{Command: []string{"/bin/true"}, Env: map[string]string{"ACME_PROXY_PROFILE": "x"}}, "signer.env: ACME_PROXY_PROFILE: the ACME_PROXY_ variables are the proxy's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v; want %q", err, tt.want)
			}
		})
	}
}

func TestAChainThatCouldNotBeRecordedIsRecordedByTheNextAttemptWithoutSigningAgain(t *testing.T) {
	ctx := context.Background()
	ca := newTestCA(t)
	dir := t.TempDir()
	runs, chainFile := filepath.Join(dir, "runs"), filepath.Join(dir, "chain.pem")
	b := newBench(t, Options{Command: []string{program(t, "echo run >> "+runs+"\ncat "+chainFile)}})
	req, key := b.finalized(t, "a.example.com")
	leaf := ca.leaf(t, key.Public(), []string{"a.example.com"})
	os.WriteFile(chainFile, pemOf(leaf, ca.inter), 0o644)
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	b.settler.issuedErr = errors.New("database is locked")
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)); out.Kind() != "retry" || !strings.Contains(out.String(), "database is locked") {
		t.Fatalf("outcome %s; want a retry naming the recording error", out)
	}
	b.settler.issuedErr = nil
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)); out.Kind() != "done" {
		t.Fatalf("outcome %s; want done", out)
	}
	if chain := b.settler.issued[req.OrderID]; len(chain) != 2 || !slices.Equal(chain[0], leaf.Raw) {
		t.Errorf("recorded %d certificates; want the chain the program printed", len(chain))
	}
	if got, _ := os.ReadFile(runs); string(got) != "run\n" {
		t.Errorf("the program ran %d times; want once: the order is signed once", strings.Count(string(got), "run"))
	}
}

func TestTheProgramReadsTheOrdersCertificateProfileByName(t *testing.T) {
	ctx := context.Background()
	in := filepath.Join(t.TempDir(), "stdin.json")
	b := newBench(t, Options{Command: []string{program(t, "cat > "+in+"\nexit 75")}})
	req, _ := b.finalized(t, "a.example.com")
	req.CertificateProfile = &signer.CertificateProfile{Name: "client"}
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	b.s.RunJob(ctx, b.job(t, req.OrderID))
	raw, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		CertificateProfile *string `json:"certificate_profile"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.CertificateProfile == nil || *got.CertificateProfile != "client" {
		t.Errorf("certificate_profile %v in %s; want \"client\"", got.CertificateProfile, raw)
	}
}

// An order's certificate profile may be withdrawn (a reload) while its
// job waits: the program is not asked to apply a profile the profile no
// longer offers, and the order fails, as a finalize would refuse it.
func TestAnOrderWhoseCertificateProfileIsNoLongerOfferedFailsWithoutRunningTheProgram(t *testing.T) {
	ctx := context.Background()
	ran := filepath.Join(t.TempDir(), "ran")
	offered := map[string]bool{"client": true, "server": true}
	b := newBenchBound(t, Options{Command: []string{program(t, "touch "+ran+"\nexit 75")}}, func(b *signer.Binding) {
		b.CertificateProfile = func(name string) (*signer.CertificateProfile, bool) {
			if !offered[name] {
				return nil, false
			}
			return &signer.CertificateProfile{Name: name}, true
		}
	})
	tests := []struct {
		name, profile string
		withdrawn     bool
	}{
		{"ok/a profile still offered is the program's to apply", "server", false},
		{"ok/an order with no profile runs the program", "", false},
		{"fail/a withdrawn profile fails the order", "client", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(ran)
			req, _ := b.finalized(t, strings.ReplaceAll(tc.name[strings.Index(tc.name, "/")+1:], " ", "-")+".example.com")
			if tc.profile != "" {
				req.CertificateProfile = &signer.CertificateProfile{Name: tc.profile}
			}
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			if tc.withdrawn {
				delete(offered, tc.profile)
				defer func() { offered[tc.profile] = true }()
			}
			job := b.job(t, req.OrderID)
			out := b.s.RunJob(ctx, job)
			_, statErr := os.Stat(ran)
			if !tc.withdrawn {
				if out.Kind() == "failed" || statErr != nil {
					t.Errorf("outcome %s, program ran: %v; want the program run", out, statErr == nil)
				}
				return
			}
			if out.Kind() != "failed" || !strings.Contains(out.String(), `"client" is no longer offered`) {
				t.Errorf("outcome %s; want failed, saying the certificate profile is no longer offered", out)
			}
			if statErr == nil {
				t.Error("the program ran for a certificate profile no longer offered")
			}
		})
	}
}

// RFC 8555 §7.4: the server MUST NOT issue a certificate with contents
// other than those requested. A leaf whose notBefore or notAfter is not
// the one the order asked for (to the second, the precision of a
// certificate's dates) is a mis-issuance: the program should have
// refused the dates (exit 2, badValidity:); the order fails at once.
func TestALeafWithOtherDatesThanTheOrderAskedForFailsTheOrderAtOnce(t *testing.T) {
	ca := newTestCA(t)
	tests := []struct {
		name string
		// asked returns the order's notBefore and notAfter for the leaf
		// the program prints.
		asked   func(leaf *x509.Certificate) (time.Time, time.Time)
		outcome string
		reason  string
	}{
		{"ok/no dates asked for", func(*x509.Certificate) (time.Time, time.Time) { return time.Time{}, time.Time{} }, "done", ""},
		{"ok/the notAfter asked for, its fraction of a second dropped",
			func(l *x509.Certificate) (time.Time, time.Time) {
				return time.Time{}, l.NotAfter.Add(400 * time.Millisecond)
			}, "done", ""},
		{"ok/both dates asked for", func(l *x509.Certificate) (time.Time, time.Time) { return l.NotBefore, l.NotAfter }, "done", ""},
		{"fail/another notAfter than the one asked for",
			func(l *x509.Certificate) (time.Time, time.Time) { return time.Time{}, l.NotAfter.Add(time.Hour) }, "failed",
			"exited 0 with a certificate that is not the order's: the leaf is valid until"},
		{"fail/another notBefore than the one asked for",
			func(l *x509.Certificate) (time.Time, time.Time) { return l.NotBefore.Add(-time.Hour), time.Time{} }, "failed",
			"exited 0 with a certificate that is not the order's: the leaf is valid from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			chainFile := filepath.Join(t.TempDir(), "chain.pem")
			b := newBench(t, Options{Command: []string{program(t, "cat "+chainFile)}})
			req, key := b.finalized(t, "a.example.com")
			leaf := ca.leaf(t, key.Public(), []string{"a.example.com"})
			os.WriteFile(chainFile, pemOf(leaf, ca.inter), 0o644)
			req.NotBefore, req.NotAfter = tt.asked(leaf)
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			out := b.s.RunJob(ctx, b.job(t, req.OrderID))
			if out.Kind() != tt.outcome || !strings.Contains(out.String(), tt.reason) {
				t.Errorf("outcome %s; want %s with %q", out, tt.outcome, tt.reason)
			}
			if _, issued := b.settler.issued[req.OrderID]; issued != (tt.outcome == "done") {
				t.Errorf("issued: %v; want %v", issued, tt.outcome == "done")
			}
		})
	}
}
