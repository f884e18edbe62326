package acmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// caaTestIdentity is the issuer domain name of the CAA test profile.
const (
	caaTestZone     = "caa.test"
	caaTestIdentity = "ca.internal.example"
)

// lateCAA is a CAA checker built once the test server's URL, and so its
// account URIs, are known.
// It remembers the names it was asked about.
type lateCAA struct {
	mu    sync.Mutex
	c     *validate.CAAChecker
	asked []string
	// gate, when set, runs before each lookup (a test holds lookups back).
	gate func()
}

func (l *lateCAA) CheckCAA(ctx context.Context, domain string, wildcard bool, accountID, method string) error {
	l.mu.Lock()
	c, gate := l.c, l.gate
	l.asked = append(l.asked, domain)
	l.mu.Unlock()
	if gate != nil {
		gate()
	}
	return c.CheckCAA(ctx, domain, wildcard, accountID, method)
}

func (l *lateCAA) askedAbout(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.asked, name)
}

// dnsAlwaysMet is a validator whose dns-01 challenges are always met, so
// that a wildcard reaches its CAA check without a DNS zone for its TXT
// records; the other challenges are checked for real.
type dnsAlwaysMet struct{ authority.Validator }

func (dnsAlwaysMet) DNS01(context.Context, string, string) error { return nil }

// caaEnv is a profile checking CAA through an in-test DNS server, its
// account URIs being the server's own account URLs, on a fake clock.
func caaEnv(t *testing.T) (*testEnv, *testdns.Server, *clocktest.Fake) {
	e, d, clk, _ := caaEnvChecker(t)
	return e, d, clk
}

// caaEnvChecker is caaEnv with its checker.
func caaEnvChecker(t *testing.T) (*testEnv, *testdns.Server, *clocktest.Fake, *lateCAA) {
	t.Helper()
	d, err := testdns.Start(caaTestZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	clk := clocktest.New(time.Now())
	late := &lateCAA{}
	e := newTestEnvWith(t, envOptions{
		mutate: func(c *ProfileConfig) { c.CAA = &CAAConfig{Identities: []string{caaTestIdentity}} },
		opts:   func(o *Options) { o.Clock, o.CAA, o.Validator = clk, late, dnsAlwaysMet{o.Validator} },
	})
	v, err := validate.New(validate.Config{Resolvers: []string{d.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	chk, err := validate.NewCAAChecker(v, validate.CAAConfig{Identities: []string{caaTestIdentity}, AccountURIPrefix: e.url("/account/")})
	if err != nil {
		t.Fatal(err)
	}
	late.mu.Lock()
	late.c = chk
	late.mu.Unlock()
	return e, d, clk, late
}

// An operator who pins a name to another CA with CAA expects this server
// to refuse it at validation: the challenge and its authorization become
// invalid with a caa problem (a dns one when the records cannot be read)
// that names the identifier and quotes the record, and the order with
// them. A record naming this server — for the very account, by its
// account URL — lets validation succeed.
func TestACAAMismatchMakesTheChallengeAndTheAuthorizationInvalid(t *testing.T) {
	e, d, _ := caaEnv(t)
	alice := e.rawClient()
	alice.register()
	d.AddCAA("pinned."+caaTestZone, 0, "issue", "other-ca.example")
	d.AddCAA("forbidden."+caaTestZone, 0, "issue", ";")
	d.AddCAA("mine."+caaTestZone, 0, "issue", caaTestIdentity+"; accounturi="+alice.kid)
	d.AddCAA("theirs."+caaTestZone, 0, "issue", caaTestIdentity+"; accounturi="+e.url("/account/someone-else"))
	d.AddCAA("dns-only."+caaTestZone, 0, "issue", caaTestIdentity+"; validationmethods=dns-01")
	d.AddCAA("http-only."+caaTestZone, 0, "issue", caaTestIdentity+"; validationmethods=http-01")
	d.SetRcode("broken."+caaTestZone, dns.RcodeServerFailure)
	tests := []struct {
		name     string
		host     string
		want     acme.ProblemType // "" for valid
		inDetail string
	}{
		{"ok/no CAA record", "plain", "", ""},
		{"ok/accounturi is this account's URL", "mine", "", ""},
		{"ok/validationmethods lists http-01", "http-only", "", ""},
		{"fail/issue names another CA", "pinned", acme.ErrorCAA, `0 issue "other-ca.example"`},
		{"fail/issue ; forbids every CA", "www.forbidden", acme.ErrorCAA, `0 issue ";"`},
		{"fail/accounturi names another account", "theirs", acme.ErrorCAA, "another account"},
		{"fail/validationmethods lists only dns-01", "dns-only", acme.ErrorCAA, "validationmethods=dns-01"},
		{"fail/SERVFAIL fails closed", "broken", acme.ErrorDNS, "SERVFAIL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.host + "." + caaTestZone
			o := alice.order(dnsID(name))
			ch, r := alice.answerHTTP01(o.Authorizations[0], "")
			if r.status != http.StatusOK {
				t.Fatalf("challenge POST: %d %s", r.status, r.body)
			}
			if tt.want == "" {
				alice.await(o.Authorizations[0], "valid")
				alice.await(o.url, "ready")
				return
			}
			alice.await(o.Authorizations[0], "invalid")
			got := decodeAs[challengeJSON](t, alice.read(ch.URL))
			var p problem.Problem
			if got.Status != acme.StatusInvalid || json.Unmarshal(got.Error, &p) != nil || p.Type != tt.want {
				t.Fatalf("challenge is %s with error %s, want invalid with a %s problem", got.Status, got.Error, tt.want)
			}
			if !strings.Contains(p.Detail, name) && !strings.Contains(p.Detail, strings.TrimPrefix(name, "www.")) {
				t.Errorf("detail %q does not name %s", p.Detail, name)
			}
			if !strings.Contains(p.Detail, tt.inDetail) {
				t.Errorf("detail %q does not quote %q", p.Detail, tt.inDetail)
			}
			if p.Identifier == nil || p.Identifier.Value != name {
				t.Errorf("problem identifier %+v, want %s", p.Identifier, name)
			}
			alice.await(o.url, "invalid")
		})
	}
}

// A wildcard is judged by the issuewild records where there are any
// (RFC 8659 §4.3), with dns-01 as the method: the same zone can allow
// this CA for its names and forbid it for the wildcard, or the reverse.
func TestAWildcardIsCheckedAgainstItsIssuewildRecords(t *testing.T) {
	e, d, _ := caaEnv(t)
	alice := e.rawClient()
	alice.register()
	d.AddCAA("wild-ok."+caaTestZone, 0, "issue", ";")
	d.AddCAA("wild-ok."+caaTestZone, 0, "issuewild", caaTestIdentity+"; validationmethods=dns-01")
	d.AddCAA("wild-no."+caaTestZone, 0, "issue", caaTestIdentity)
	d.AddCAA("wild-no."+caaTestZone, 0, "issuewild", ";")
	for _, tt := range []struct {
		name, host string
		want       acme.Status
	}{
		{"ok/issuewild names this CA though issue forbids all", "wild-ok", acme.StatusValid},
		{"fail/issuewild forbids though issue names this CA", "wild-no", acme.StatusInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := alice.order(dnsID("*." + tt.host + "." + caaTestZone))
			ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
			if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status != http.StatusOK {
				t.Fatalf("challenge POST: %d %s", r.status, r.body)
			}
			alice.await(o.Authorizations[0], string(tt.want))
			if tt.want == acme.StatusInvalid {
				got := decodeAs[challengeJSON](t, alice.read(ch.URL))
				var p problem.Problem
				if json.Unmarshal(got.Error, &p) != nil || p.Type != acme.ErrorCAA || !strings.Contains(p.Detail, `0 issuewild ";"`) {
					t.Fatalf("challenge error %s, want a caa problem quoting the issuewild record", got.Error)
				}
			}
		})
	}
}

// When several names of an order are refused at finalize, each has its
// subproblem, so the client learns every record to fix at once.
func TestAFinalizeRefusedByCAAForSeveralNamesHasASubproblemForEach(t *testing.T) {
	e, d, clk := caaEnv(t)
	alice := e.rawClient()
	alice.register()
	names := []string{"a.multi." + caaTestZone, "b.multi." + caaTestZone, "c.multi." + caaTestZone}
	o := alice.readyOrder(names...)
	d.AddCAA("a.multi."+caaTestZone, 0, "issue", "other-ca.example")
	d.AddCAA("c.multi."+caaTestZone, 0, "issue", ";")
	clk.Advance(authority.CAARecheckAfter + time.Minute)
	r := alice.finalize(o, newCSR(t, newKey(t), "", names, nil))
	wantProblem(t, r, http.StatusForbidden, acme.ErrorCAA)
	var got []string
	for _, sp := range r.problem.Subproblems {
		if sp.Identifier != nil && sp.Type == acme.ErrorCAA {
			got = append(got, sp.Identifier.Value)
		}
	}
	slices.Sort(got)
	if want := []string{names[0], names[2]}; !slices.Equal(got, want) {
		t.Fatalf("subproblems for %v, want %v: %s", got, want, r.body)
	}
}

// A CAA record that changed after validation is honoured at finalize
// once the validation is older than 7 hours (an hour short of the CA/B
// Forum's 8-hour reuse period): the finalize is refused with a caa
// problem naming the identifier, nothing is issued, and the order stays
// ready, so that a finalize after the records are fixed succeeds. Within
// 7 hours the validation's check stands.
func TestFinalizeChecksCAAAgainWhenTheValidationIsOlderThanSevenHours(t *testing.T) {
	ctx := context.Background()
	e, d, clk := caaEnv(t)
	alice := e.rawClient()
	alice.register()
	name := "later." + caaTestZone

	fresh := alice.readyOrder(name)
	stale := alice.readyOrder(name)
	d.AddCAA(name, 0, "issue", "other-ca.example") // the owner pins the name elsewhere

	clk.Advance(authority.CAARecheckAfter - time.Minute)
	if r := alice.finalize(fresh, newCSR(t, newKey(t), "", []string{name}, nil)); r.status != http.StatusOK {
		t.Fatalf("finalize within 7h of validation: %d %s, want it issued on the validation's CAA check", r.status, r.body)
	}
	alice.await(fresh.url, "valid")

	clk.Advance(2 * time.Minute)
	r := alice.finalize(stale, newCSR(t, newKey(t), "", []string{name}, nil))
	wantProblem(t, r, http.StatusForbidden, acme.ErrorCAA)
	if len(r.problem.Subproblems) != 1 || r.problem.Subproblems[0].Identifier == nil || r.problem.Subproblems[0].Identifier.Value != name {
		t.Fatalf("refusal %s: want one subproblem for %s", r.body, name)
	}
	if !strings.Contains(r.problem.Detail, `0 issue "other-ca.example"`) {
		t.Errorf("detail %q does not quote the record", r.problem.Detail)
	}
	if _, err := e.db.CertificateOfOrder(ctx, path.Base(stale.url)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a certificate was stored despite the CAA refusal (err %v)", err)
	}
	if got := decodeAs[orderJSON](t, alice.read(stale.url)); got.Status != acme.StatusReady {
		t.Fatalf("after the CAA refusal the order is %s, want ready", got.Status)
	}

	d.ClearCAA(name)
	d.AddCAA(name, 0, "issue", caaTestIdentity)
	if r := alice.finalize(stale, newCSR(t, newKey(t), "", []string{name}, nil)); r.status != http.StatusOK {
		t.Fatalf("finalize after the records name this CA: %d %s", r.status, r.body)
	}
	alice.await(stale.url, "valid")
}

// The CAA lookups a finalize makes again run side by side: each of four
// names' lookups waits here until all four have begun, which lookups one
// after another never reach (behind slow DNS they would outlast the
// request's deadline on every finalize).
func TestAFinalizeChecksTheCAAOfItsNamesSideBySide(t *testing.T) {
	e, d, clk, late := caaEnvChecker(t)
	alice := e.rawClient()
	alice.register()
	names := []string{"n1." + caaTestZone, "n2." + caaTestZone, "n3." + caaTestZone, "n4." + caaTestZone}
	for _, n := range names {
		d.AddCAA(n, 0, "issue", caaTestIdentity)
	}
	o := alice.readyOrder(names...)
	clk.Advance(authority.CAARecheckAfter + time.Minute)
	var (
		arrived    atomic.Int32
		allBegun   = make(chan struct{})
		sideBySide atomic.Bool
		gaveUp     atomic.Bool
	)
	late.mu.Lock()
	late.gate = func() {
		if arrived.Add(1) == int32(len(names)) {
			sideBySide.Store(true)
			close(allBegun)
		}
		select {
		case <-allBegun:
		case <-time.After(2 * time.Second): // one after another: give up waiting
			gaveUp.Store(true)
		}
	}
	late.mu.Unlock()
	if r := alice.finalize(o, newCSR(t, newKey(t), "", names, nil)); r.status != http.StatusOK {
		t.Fatalf("finalize: %d %s", r.status, r.body)
	}
	if !sideBySide.Load() || gaveUp.Load() {
		t.Errorf("the finalize's %d CAA lookups never ran at once", len(names))
	}
}

// CAA does not apply to IP addresses (RFC 8738 §7): an IP identifier
// validates on a profile that checks CAA without its address being
// looked up as a DNS name, and a DNS name beside it is.
func TestAnIPIdentifierIsNotCheckedForCAA(t *testing.T) {
	e, _, _, late := caaEnvChecker(t)
	alice := e.rawClient()
	alice.register()
	o := alice.order(ipID("127.0.0.1"), dnsID("www."+caaTestZone))
	for _, az := range o.Authorizations {
		if _, r := alice.answerHTTP01(az, ""); r.status != http.StatusOK {
			t.Fatalf("challenge POST: %d %s", r.status, r.body)
		}
		alice.await(az, "valid")
	}
	alice.await(o.url, "ready")
	if late.askedAbout("127.0.0.1") {
		t.Fatal("the CAA checker was asked about an IP address")
	}
	if !late.askedAbout("www." + caaTestZone) {
		t.Fatal("the CAA checker was not asked about the DNS name of the same order")
	}
}

// The directory tells clients which CAA identities to publish (RFC 8555
// §7.1.1 meta.caaIdentities) when the profile checks CAA, and says
// nothing when it does not.
func TestTheDirectoryListsTheCAAIdentitiesOfAProfileThatChecksCAA(t *testing.T) {
	for _, tt := range []struct {
		name string
		caa  *CAAConfig
		want []string
	}{
		{"ok/caa on", &CAAConfig{Identities: []string{"ca.internal.example", "ca2.internal.example"}}, []string{"ca.internal.example", "ca2.internal.example"}},
		{"ok/caa off", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, func(c *ProfileConfig) { c.CAA = tt.caa })
			var dir struct {
				Meta map[string]json.RawMessage `json:"meta"`
			}
			if err := json.Unmarshal(e.plain(http.MethodGet, e.dirURL).body, &dir); err != nil {
				t.Fatal(err)
			}
			raw, present := dir.Meta["caaIdentities"]
			if tt.want == nil {
				if present {
					t.Fatalf("meta.caaIdentities = %s for a profile that checks no CAA", raw)
				}
				return
			}
			var got []string
			if err := json.Unmarshal(raw, &got); err != nil || strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("meta.caaIdentities = %s, want %v", raw, tt.want)
			}
		})
	}
}

// A profile configured with caa gets a checker from its own validator,
// asking its resolvers: NewServer builds it, and refuses a validator that
// cannot look up DNS records rather than silently checking nothing.
func TestAProfileWithCAANeedsAValidatorThatCanLookUpCAA(t *testing.T) {
	cfg := ProfileConfig{Profile: "p", CAA: &CAAConfig{Identities: []string{"ca.example"}}}
	opts := Options{Validator: sjValidator{}}
	err := cfg.caaChecker(&opts)
	if err == nil || !strings.HasPrefix(err.Error(), "caa:") {
		t.Fatalf("caaChecker with a validator that cannot look up CAA = %v, want an error naming caa", err)
	}
	// The checker built asks the validator's resolvers: the profile's.
	d, err := testdns.Start(caaTestZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.AddCAA("pinned."+caaTestZone, 0, "issue", "other-ca.example")
	v, err := validate.New(validate.Config{Resolvers: []string{d.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	opts = Options{Validator: v}
	if err := cfg.caaChecker(&opts); err != nil || opts.CAA == nil {
		t.Fatalf("caaChecker with the project's validator: %v, checker %v", err, opts.CAA)
	}
	err = opts.CAA.CheckCAA(context.Background(), "pinned."+caaTestZone, false, "acct", acme.ChallengeHTTP01)
	if p, ok := problem.As(err); !ok || p.Type != acme.ErrorCAA {
		t.Fatalf("the built checker on the profile's resolver = %v, want the record there refusing", err)
	}
	cfg.CAA = nil
	opts = Options{Validator: v}
	if err := cfg.caaChecker(&opts); err != nil || opts.CAA != nil {
		t.Fatalf("caaChecker without caa: %v, checker %v; want none", err, opts.CAA)
	}
}

// Each caa configuration error names its key.
func TestACAAConfigurationErrorNamesItsKey(t *testing.T) {
	tests := []struct {
		name string
		caa  *CAAConfig
		want string
	}{
		{"fail/no identities", &CAAConfig{}, "caa.identities: at least one"},
		{"fail/identity not a domain name", &CAAConfig{Identities: []string{"ca internal"}}, `caa.identities: "ca internal"`},
		{"fail/identity with a trailing dot", &CAAConfig{Identities: []string{"ca.example."}}, `caa.identities: "ca.example."`},
		{"fail/identity listed twice", &CAAConfig{Identities: []string{"ca.example", "ca.example"}}, "listed twice"},
		{"fail/account_uri_prefix not absolute", &CAAConfig{Identities: []string{"ca.example"}, AccountURIPrefix: "/acme/p/account/"}, "caa.account_uri_prefix:"},
		{"fail/account_uri_prefix without the trailing slash", &CAAConfig{Identities: []string{"ca.example"}, AccountURIPrefix: "https://ca.example/acme/p/account"}, `caa.account_uri_prefix: "https://ca.example/acme/p/account": must end with "/"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ProfileConfig{Profile: "p", CAA: tt.caa}
			c.SetDefaults()
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	c := ProfileConfig{Profile: "p", CAA: &CAAConfig{Identities: []string{"ca.example"}, AccountURIPrefix: "https://ca.example/acme/p/account/"}}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("a sound caa block refused: %v", err)
	}
}

// An order whose signing was put off after its finalize — a finalize
// that died after claiming it, an order waiting for a worker that holds
// the signer — is signed only once the CAA records of each authorization
// validated more than 7 hours before are checked again: the check at
// validation (or finalize) does not stand for a signature made later.
// Records that now forbid fail the order with their caa problem, records
// that cannot be read leave it processing to be tried again, and records
// that allow it let it be signed.
func TestAnOrderSignedLaterChecksCAAAgainWhenItsValidationIsOlderThanSevenHours(t *testing.T) {
	tests := []struct {
		name     string
		records  func(d *testdns.Server, name string)
		want     acme.Status
		wantProb acme.ProblemType
	}{
		{name: "records that now forbid fail the order", records: func(d *testdns.Server, name string) { d.AddCAA(name, 0, "issue", "other-ca.example") },
			want: acme.StatusInvalid, wantProb: acme.ErrorCAA},
		{name: "records that cannot be read leave it processing", records: func(d *testdns.Server, name string) { d.SetRcode(name, dns.RcodeServerFailure) },
			want: acme.StatusProcessing},
		{name: "records that allow it let it be signed", records: func(d *testdns.Server, name string) { d.AddCAA(name, 0, "issue", caaTestIdentity) },
			want: acme.StatusValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, d, clk := caaEnv(t)
			alice := e.rawClient()
			alice.register()
			name := "deferred." + caaTestZone
			o := alice.readyOrder(name)
			tt.records(d, name)
			clk.Advance(authority.CAARecheckAfter + time.Minute)
			// A finalize claimed the order and died before signing it.
			id := path.Base(o.url)
			claimed := clk.Now().Add(-2 * authority.StuckAfter)
			if won, err := e.db.ClaimOrderForIssue(ctx, id, newCSR(t, newKey(t), "", []string{name}, nil), store.OrderClient{}, "", claimed); err != nil || !won {
				t.Fatalf("claim: %v %v", won, err)
			}
			if n, err := e.srv.Authority().ResumeStuckOrders(ctx); n != 1 {
				t.Fatalf("resume: %d (%v); want the order resumed", n, err)
			}
			got := decodeAs[orderJSON](t, alice.read(o.url))
			if got.Status != tt.want {
				t.Fatalf("after the resume the order is %s (error %s), want %s", got.Status, got.Error, tt.want)
			}
			_, err := e.db.CertificateOfOrder(ctx, id)
			if issued := err == nil; issued != (tt.want == acme.StatusValid) {
				t.Fatalf("certificate stored: %v (err %v), want %v", issued, err, tt.want == acme.StatusValid)
			}
			if tt.wantProb == "" {
				return
			}
			var p problem.Problem
			if err := json.Unmarshal(got.Error, &p); err != nil || p.Type != tt.wantProb {
				t.Fatalf("order error %s (%v), want a %s problem", got.Error, err, tt.wantProb)
			}
			if !strings.Contains(string(got.Error), `0 issue \"other-ca.example\"`) {
				t.Errorf("order error %s does not quote the record", got.Error)
			}
		})
	}
}

// The Baseline Requirements let a CAA check stand for at most 8 hours
// before a signature. A validation stamped just under 8 hours ago by this
// instance's clock is no proof of that: its lookup ran before the stamp,
// the stamp may come from another instance of the fleet whose clock runs
// ahead, and the signature comes after the decision. So a finalize, or a
// signing put off after its finalize, within the last hour of those 8
// hours checks the records again rather than sign on the old check.
func TestASigningNearlyEightHoursAfterTheValidationChecksCAAAgain(t *testing.T) {
	const age = 8*time.Hour - time.Minute // within a minute of the limit
	tests := []struct {
		name string
		sign func(t *testing.T, e *testEnv, clk *clocktest.Fake, alice *rawClient, o createdOrder, name string) (acme.Status, []byte)
	}{
		{name: "at finalize", sign: func(t *testing.T, e *testEnv, clk *clocktest.Fake, alice *rawClient, o createdOrder, name string) (acme.Status, []byte) {
			r := alice.finalize(o, newCSR(t, newKey(t), "", []string{name}, nil))
			if r.status == http.StatusOK {
				return acme.StatusValid, r.body
			}
			wantProblem(t, r, http.StatusForbidden, acme.ErrorCAA)
			return acme.StatusInvalid, r.body
		}},
		{name: "before a signing put off after the finalize", sign: func(t *testing.T, e *testEnv, clk *clocktest.Fake, alice *rawClient, o createdOrder, name string) (acme.Status, []byte) {
			ctx := context.Background()
			// A finalize claimed the order and died before signing it.
			id := path.Base(o.url)
			claimed := clk.Now().Add(-2 * authority.StuckAfter)
			if won, err := e.db.ClaimOrderForIssue(ctx, id, newCSR(t, newKey(t), "", []string{name}, nil), store.OrderClient{}, "", claimed); err != nil || !won {
				t.Fatalf("claim: %v %v", won, err)
			}
			if n, err := e.srv.Authority().ResumeStuckOrders(ctx); n != 1 {
				t.Fatalf("resume: %d (%v); want the order resumed", n, err)
			}
			got := decodeAs[orderJSON](t, alice.read(o.url))
			return got.Status, got.Error
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, d, clk := caaEnv(t)
			alice := e.rawClient()
			alice.register()
			name := "nearly." + caaTestZone
			o := alice.readyOrder(name)
			d.AddCAA(name, 0, "issue", "other-ca.example") // the owner pins the name elsewhere
			clk.Advance(age)
			if st, body := tt.sign(t, e, clk, alice, o, name); st != acme.StatusInvalid || !strings.Contains(string(body), "other-ca.example") {
				t.Fatalf("signing %s after the validation: %s %s, want it refused by the records checked again", age, st, body)
			}
			if _, err := e.db.CertificateOfOrder(ctx, path.Base(o.url)); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a certificate was stored on a CAA check %s old (err %v)", age, err)
			}
		})
	}
}
