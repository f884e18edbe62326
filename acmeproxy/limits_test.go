package acmeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
	"golang.org/x/crypto/acme"
)

func rate(n int, p time.Duration) *LimitConfig { return &LimitConfig{Count: n, Period: Duration(p)} }
func limitCap(n int) *LimitConfig              { return &LimitConfig{Count: n} }

// everyLimitOff is a limits block with every limit off: a test turns on
// the one it is about.
func everyLimitOff() *LimitsConfig {
	off := func() *LimitConfig { return &LimitConfig{Off: true} }
	return &LimitsConfig{AccountsPerIP: off(), OrdersPerAccount: off(), PendingAuthorizations: off(),
		FailedValidations: off(), DuplicateCertificates: off(), MaxIdentifiers: off()}
}

// limitMetrics counts RateLimited by limit.
type limitMetrics struct {
	authority.NopMetrics
	mu sync.Mutex
	n  map[string]int
}

func (m *limitMetrics) RateLimited(_, limit string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[limit]++
}

func (m *limitMetrics) count(limit string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[limit]
}

// limitEnv is a profile with limits set by set (on top of every limit
// off), a fake clock and counted metrics.
func limitEnv(t *testing.T, set func(*LimitsConfig), more ...func(*envOptions)) (*testEnv, *clocktest.Fake, *limitMetrics) {
	t.Helper()
	clk := clocktest.New(time.Now())
	m := &limitMetrics{}
	eo := envOptions{
		mutate: func(c *ProfileConfig) {
			c.Limits = everyLimitOff()
			set(c.Limits)
		},
		opts: func(o *Options) { o.Clock, o.Metrics = clk, m },
	}
	for _, f := range more {
		f(&eo)
	}
	return newTestEnvWith(t, eo), clk, m
}

func accountOrders(t *testing.T, e *testEnv, c *rawClient) int {
	t.Helper()
	// Every order stored, invalid ones too (the ACME list leaves those out).
	rows, err := e.db.ListOrders(context.Background(), store.OrderFilter{AccountID: c.kid[strings.LastIndex(c.kid, "/")+1:], Limit: store.MaxPage})
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

func wantRateLimited(t *testing.T, r rawResponse, limit string, refill time.Duration) {
	t.Helper()
	if r.status != http.StatusTooManyRequests || r.problem == nil || r.problem.Type != vocab.ErrorRateLimited {
		t.Fatalf("got %d %s; want 429 rateLimited", r.status, r.body)
	}
	if !strings.HasPrefix(r.problem.Detail, limit+": ") {
		t.Errorf("detail %q does not name the limit %s", r.problem.Detail, limit)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || time.Duration(ra)*time.Second > refill {
		t.Errorf("Retry-After %q; want whole seconds from 1 to the refill, %s", r.header.Get("Retry-After"), refill)
	}
}

// Each limit, set tight, refuses the request past it with 429
// rateLimited, a Retry-After no longer than the bucket's refill and a
// detail naming the limit; the refused request leaves no order or account
// behind; and what the limit does not cover still goes through.
func TestEachLimitRefusesThePastRequestWithRateLimitedAndChangesNothingElse(t *testing.T) {
	tests := []struct {
		name   string
		set    func(*LimitsConfig)
		refill time.Duration // the longest Retry-After that is right
		run    func(t *testing.T, e *testEnv) (refused rawResponse, after func(t *testing.T))
	}{
		{authority.LimitAccountsPerIP, func(l *LimitsConfig) { l.AccountsPerIP = rate(2, time.Hour) }, 30 * time.Minute,
			func(t *testing.T, e *testEnv) (rawResponse, func(*testing.T)) {
				e.rawClient().register()
				e.rawClient().register()
				c := e.rawClient()
				r := c.post(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
				return r, func(t *testing.T) {
					// The refused key has no account.
					if r := c.post(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{embedJWK: true}); r.status != http.StatusBadRequest {
						t.Errorf("the refused key's account lookup: %d %s; want 400 accountDoesNotExist", r.status, r.body)
					}
				}
			}},
		{authority.LimitOrdersPerAccount, func(l *LimitsConfig) { l.OrdersPerAccount = rate(2, time.Hour) }, 30 * time.Minute,
			func(t *testing.T, e *testEnv) (rawResponse, func(*testing.T)) {
				c := e.rawClient()
				c.register()
				c.order(dnsID("a.example.com"))
				c.order(dnsID("b.example.com"))
				r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("c.example.com")}}, jwsOpts{})
				return r, func(t *testing.T) {
					if n := accountOrders(t, e, c); n != 2 {
						t.Errorf("the account has %d orders; want the 2 allowed", n)
					}
					other := e.rawClient()
					other.register()
					other.order(dnsID("c.example.com")) // another account's bucket is its own
				}
			}},
		{authority.LimitPendingAuthorizations, func(l *LimitsConfig) { l.PendingAuthorizations = limitCap(3) }, authority.OrderLifetime,
			func(t *testing.T, e *testEnv) (rawResponse, func(*testing.T)) {
				c := e.rawClient()
				c.register()
				c.order(dnsID("a.example.com"), dnsID("b.example.com"))
				r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("c.example.com"), dnsID("d.example.com")}}, jwsOpts{})
				return r, func(t *testing.T) {
					if n := accountOrders(t, e, c); n != 1 {
						t.Errorf("the account has %d orders; want 1", n)
					}
					c.order(dnsID("c.example.com")) // the third fits the cap
				}
			}},
		{authority.LimitFailedValidations, func(l *LimitsConfig) { l.FailedValidations = rate(1, time.Hour) }, time.Hour,
			func(t *testing.T, e *testEnv) (rawResponse, func(*testing.T)) {
				c := e.rawClient()
				c.register()
				o := c.order(dnsID("fails.example.com"))
				c.answerHTTP01(o.Authorizations[0], "a wrong answer")
				c.await(o.Authorizations[0], "invalid")
				r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("ok.example.com"), dnsID("fails.example.com")}}, jwsOpts{})
				return r, func(t *testing.T) {
					// The client is told which identifier keeps failing.
					if !strings.Contains(r.problem.Detail, "validation of fails.example.com is over") {
						t.Errorf("detail %q does not name the identifier whose validations failed", r.problem.Detail)
					}
					if n := accountOrders(t, e, c); n != 1 {
						t.Errorf("the account has %d orders; want 1", n)
					}
					c.order(dnsID("ok.example.com")) // another identifier's bucket is its own
				}
			}},
		{authority.LimitDuplicateCertificates, func(l *LimitsConfig) { l.DuplicateCertificates = rate(1, 24*time.Hour) }, 24 * time.Hour,
			func(t *testing.T, e *testEnv) (rawResponse, func(*testing.T)) {
				c := e.rawClient()
				c.register()
				// The set's one certificate.
				o := c.readyOrder("a.example.com", "b.example.com")
				if r := c.finalize(o, newCSR(t, newKey(t), "", []string{"a.example.com", "b.example.com"}, nil)); r.status != http.StatusOK {
					t.Fatalf("finalize: %d %s", r.status, r.body)
				}
				// The same set in another order, another case.
				r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("B.example.com"), dnsID("a.example.com")}}, jwsOpts{})
				return r, func(t *testing.T) {
					if n := accountOrders(t, e, c); n != 1 {
						t.Errorf("the account has %d orders; want 1", n)
					}
					c.order(dnsID("a.example.com")) // a subset is another set
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, _, m := limitEnv(t, tc.set)
			r, after := tc.run(t, e)
			wantRateLimited(t, r, tc.name, tc.refill)
			if r.header.Get("Replay-Nonce") == "" {
				t.Errorf("the refusal has no Replay-Nonce")
			}
			if got := m.count(tc.name); got != 1 {
				t.Errorf("metrics counted %d refusals by %s; want 1", got, tc.name)
			}
			after(t)
		})
	}
}

func TestAnOrderOverMaxIdentifiersIsRejectedNamingTheLimit(t *testing.T) {
	e, _, _ := limitEnv(t, func(l *LimitsConfig) { l.MaxIdentifiers = limitCap(2) })
	c := e.rawClient()
	c.register()
	r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("a.example.com"), dnsID("b.example.com"), dnsID("c.example.com")}}, jwsOpts{})
	// No wait makes such an order fit: it is not rateLimited.
	wantProblem(t, r, http.StatusBadRequest, vocab.ErrorRejectedIdentifier)
	if !strings.Contains(r.problem.Detail, "max_identifiers") || !strings.Contains(r.problem.Detail, "at most 2") {
		t.Errorf("detail %q does not name the limit and its count", r.problem.Detail)
	}
	c.order(dnsID("a.example.com"), dnsID("b.example.com"))
}

// An order of more identifiers than the account may hold pending
// authorizations can never fit the cap: it is rejected naming the limit,
// not told to wait (rateLimited with a Retry-After no wait honours).
func TestAnOrderLargerThanThePendingAuthorizationsCapIsRejectedNamingTheLimit(t *testing.T) {
	e, _, _ := limitEnv(t, func(l *LimitsConfig) { l.PendingAuthorizations = limitCap(2) })
	c := e.rawClient()
	c.register()
	r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("a.example.com"), dnsID("b.example.com"), dnsID("c.example.com")}}, jwsOpts{})
	wantProblem(t, r, http.StatusBadRequest, vocab.ErrorRejectedIdentifier)
	if !strings.Contains(r.problem.Detail, "pending_authorizations") || !strings.Contains(r.problem.Detail, "at most 2 identifiers") {
		t.Errorf("detail %q does not name the limit and its count", r.problem.Detail)
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a refusal no wait can change", r.header.Get("Retry-After"))
	}
	c.order(dnsID("a.example.com"), dnsID("b.example.com"))
}

func TestDefaultLimitsBoundAnOrderToAHundredIdentifiers(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.rawClient()
	c.register()
	ids := make([]map[string]string, 101)
	for i := range ids {
		ids[i] = dnsID(fmt.Sprintf("n%d.example.com", i))
	}
	r := c.post(e.url("/new-order"), map[string]any{"identifiers": ids}, jwsOpts{})
	wantProblem(t, r, http.StatusBadRequest, vocab.ErrorRejectedIdentifier)
	c.order(ids[:100]...)
}

// An order as large as an order may be (max_identifiers at its bound, or
// off for an account) is stored under every limit: failed_validations
// checks one bucket per identifier, and the store takes them all in the
// order's write rather than failing it as a fault of its own.
func TestAnOrderOfAsManyIdentifiersAsAnOrderMayHoldIsStoredWithEveryLimitOn(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name string
			set  func(*LimitsConfig)
		}{
			{"max_identifiers at its bound", func(l *LimitsConfig) {
				l.MaxIdentifiers = limitCap(maxIdentifiers)
			}},
			{"max_identifiers off", func(l *LimitsConfig) {
				l.MaxIdentifiers = &LimitConfig{Off: true}
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				e, _, _ := limitEnv(t, func(l *LimitsConfig) {
					d := authority.DefaultLimits()
					l.OrdersPerAccount = rate(d.OrdersPerAccount.Count, d.OrdersPerAccount.Period)
					l.PendingAuthorizations = limitCap(maxIdentifiers)
					l.FailedValidations = rate(d.FailedValidations.Count, d.FailedValidations.Period)
					l.DuplicateCertificates = rate(d.DuplicateCertificates.Count, d.DuplicateCertificates.Period)
					tc.set(l)
				})
				c := e.rawClient()
				c.register()
				ids := make([]map[string]string, maxIdentifiers)
				for i := range ids {
					ids[i] = dnsID(fmt.Sprintf("n%d.example", i))
				}
				r := c.post(e.url("/new-order"), map[string]any{"identifiers": ids}, jwsOpts{})
				if r.status != http.StatusCreated {
					t.Fatalf("new-order of %d identifiers: %d %s; want 201", len(ids), r.status, r.body)
				}
				if o := decodeAs[orderJSON](t, r); len(o.Authorizations) != maxIdentifiers {
					t.Fatalf("the order has %d authorizations; want %d", len(o.Authorizations), maxIdentifiers)
				}
			})
		}
	})
}

func TestAnEmptiedBucketLetsOneMoreOrderInPerEmissionInterval(t *testing.T) {
	e, clk, _ := limitEnv(t, func(l *LimitsConfig) { l.OrdersPerAccount = rate(2, 2*time.Minute) })
	c := e.rawClient()
	c.register()
	c.order(dnsID("a.example.com"))
	c.order(dnsID("b.example.com"))
	newOrder := func(name string) rawResponse {
		return c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID(name)}}, jwsOpts{})
	}
	r := newOrder("c.example.com")
	wantRateLimited(t, r, authority.LimitOrdersPerAccount, time.Minute)
	if got := r.header.Get("Retry-After"); got != "60" {
		t.Fatalf("Retry-After %q; want 60, one emission interval", got)
	}
	clk.Advance(59 * time.Second)
	if r := newOrder("c.example.com"); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Fatalf("a second early: %d Retry-After %q; want 429 and 1", r.status, r.header.Get("Retry-After"))
	}
	clk.Advance(time.Second)
	if r := newOrder("c.example.com"); r.status != http.StatusCreated {
		t.Fatalf("after the Retry-After: %d %s; want 201", r.status, r.body)
	}
	wantRateLimited(t, newOrder("d.example.com"), authority.LimitOrdersPerAccount, time.Minute)
}

func TestRefusalsAreAuditedOncePerAccountAndLimitAnInterval(t *testing.T) {
	e, clk, m := limitEnv(t, func(l *LimitsConfig) { l.OrdersPerAccount = rate(1, 24*time.Hour) })
	ctx := context.Background()
	c := e.rawClient()
	c.register()
	other := e.rawClient()
	other.register()
	c.order(dnsID("a.example.com"))
	other.order(dnsID("a.example.com"))
	refuse := func(c *rawClient, n int) {
		for range n {
			wantRateLimited(t, c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("b.example.com")}}, jwsOpts{}),
				authority.LimitOrdersPerAccount, 24*time.Hour)
		}
	}
	rows := func(c *rawClient) []store.AuditEvent {
		evs, err := e.db.SearchAudit(ctx, store.AuditFilter{Event: vocab.EventRateLimited, AccountID: c.kid[strings.LastIndex(c.kid, "/")+1:]})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	refuse(c, 5)
	refuse(other, 2)
	if got := rows(c); len(got) != 1 || got[0].Reason != authority.LimitOrdersPerAccount || got[0].Outcome != authority.OutcomeRefused {
		t.Fatalf("after 5 refusals: %+v; want one refused row naming the limit", got)
	}
	if got := rows(other); len(got) != 1 {
		t.Fatalf("another account's refusals: %d rows; want its own one", len(got))
	}
	clk.Advance(time.Hour)
	refuse(c, 3)
	if got := rows(c); len(got) != 2 {
		t.Fatalf("an interval later: %d rows; want 2", len(got))
	}
	if got := m.count(authority.LimitOrdersPerAccount); got != 10 {
		t.Fatalf("metrics counted %d refusals; want every one, 10", got)
	}
}

// A limit whose buckets are finer than an account — failed_validations
// has one per identifier, duplicate_certificates one per identifier set —
// is still audited once per account an interval: a client looping over
// many identifiers does not write a row for each.
func TestRefusalsByOneLimitOverSeveralOfAnAccountsBucketsAreAuditedOnce(t *testing.T) {
	tests := []struct {
		name  string
		set   func(*LimitsConfig)
		spend func(c *rawClient, name string) // empties the bucket of name
		limit string
	}{
		{"failed validations of two identifiers", func(l *LimitsConfig) { l.FailedValidations = rate(1, time.Hour) },
			func(c *rawClient, name string) {
				o := c.order(dnsID(name))
				c.answerHTTP01(o.Authorizations[0], "a wrong answer")
				c.await(o.Authorizations[0], "invalid")
			}, authority.LimitFailedValidations},
		{"certificates of two identifier sets", func(l *LimitsConfig) { l.DuplicateCertificates = rate(1, 24*time.Hour) },
			func(c *rawClient, name string) {
				o := c.readyOrder(name)
				if r := c.finalize(o, newCSR(c.t, newKey(c.t), "", []string{name}, nil)); r.status != http.StatusOK {
					c.t.Fatalf("finalize: %d %s", r.status, r.body)
				}
			}, authority.LimitDuplicateCertificates},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, _, m := limitEnv(t, tc.set)
			c := e.rawClient()
			c.register()
			names := []string{"a.example.com", "b.example.com"}
			for _, n := range names {
				tc.spend(c, n)
			}
			for _, n := range names {
				for range 2 {
					r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID(n)}}, jwsOpts{})
					if r.status != http.StatusTooManyRequests || r.problem == nil || !strings.HasPrefix(r.problem.Detail, tc.limit+": ") {
						t.Fatalf("new-order for %s: %d %s; want 429 by %s", n, r.status, r.body, tc.limit)
					}
				}
			}
			evs, err := e.db.SearchAudit(context.Background(), store.AuditFilter{Event: vocab.EventRateLimited,
				AccountID: c.kid[strings.LastIndex(c.kid, "/")+1:]})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].Reason != tc.limit {
				t.Errorf("%d rate_limited rows (%+v); want one naming %s for the account", len(evs), evs, tc.limit)
			}
			if got := m.count(tc.limit); got != 4 {
				t.Errorf("metrics counted %d refusals; want every one, 4", got)
			}
		})
	}
}

// A new-order that the limits let through but the store could not create
// gives its spend back: the next order, once the store takes writes
// again, fits the one-order bucket.
func TestAnOrderThatFailsToBeCreatedGivesItsSpendBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "acme.db")
	empty, err := store.OpenSQLite(ctx, path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := limitEnv(t, func(l *LimitsConfig) { l.OrdersPerAccount = rate(1, 24*time.Hour) }, func(eo *envOptions) {
		eo.dbPath = path
		eo.sqlite = store.SQLiteOptions{MaxPages: int(fi.Size()/4096) + 64}
	})
	c := e.rawClient()
	c.register()
	for _, size := range []int{2000, 200, 1} {
		filler := strings.Repeat("x", size)
		for {
			err := e.db.InsertAudit(ctx, store.AuditEvent{At: time.Now(), Event: "filler", Outcome: "success", Detail: filler})
			if errors.Is(err, store.ErrUnavailable) {
				break
			}
			if err != nil {
				t.Fatalf("filling the database: %v", err)
			}
		}
	}
	var idents []any
	for i := range 50 {
		idents = append(idents, dnsID(fmt.Sprintf("n%d.full.example.com", i)))
	}
	if r := c.post(e.url("/new-order"), map[string]any{"identifiers": idents}, jwsOpts{}); r.status != http.StatusServiceUnavailable {
		t.Fatalf("new-order in a full database: %d %s; want 503", r.status, r.body)
	}
	if _, err := e.db.PruneAudit(ctx, time.Now().Add(time.Hour), 0, nil, func(int64, error) (store.AuditEvent, bool) { return store.AuditEvent{}, false }); err != nil {
		t.Fatal(err)
	}
	if r := c.post(e.url("/new-order"), map[string]any{"identifiers": idents}, jwsOpts{}); r.status != http.StatusCreated {
		t.Fatalf("new-order after space was freed: %d %s; want 201 (the failed order's spend refunded)", r.status, r.body)
	}
}

// An override for an EAB label lifts a limit for the accounts bound with
// a key of that label, and for them only: for new accounts from one
// address (before the account exists) and for an account's orders.
func TestAnEABLabelsOverrideAppliesToTheAccountsItBinds(t *testing.T) {
	ctx := context.Background()
	e, _, _ := limitEnv(t, func(l *LimitsConfig) {
		l.AccountsPerIP = rate(1, time.Hour)
		l.OrdersPerAccount = rate(1, time.Hour)
		l.Overrides = []LimitOverrideConfig{
			{EABLabel: "fleet", Limit: authority.LimitAccountsPerIP, LimitConfig: LimitConfig{Count: 3}},
			{EABLabel: "fleet", Limit: authority.LimitOrdersPerAccount, LimitConfig: LimitConfig{Count: 3}},
		}
	}, func(eo *envOptions) {
		inner := eo.mutate
		eo.mutate = func(c *ProfileConfig) { inner(c); c.EAB = authority.EABOptional }
	})
	fleet := mint(t, e, "fleet", true, 0)
	other := mint(t, e, "other", true, 0)

	// x/crypto/acme waits out a Retry-After; these clients must not.
	newClient := func() *acme.Client {
		c := newAccountClient(e)
		c.RetryBackoff = func(int, *http.Request, *http.Response) time.Duration { return -1 }
		return c
	}
	bare := newClient()
	if _, err := registerWith(ctx, bare, nil); err != nil {
		t.Fatalf("the address's one bare account: %v", err)
	}
	_, err := registerWith(ctx, newClient(), &other)
	wantACMEProblem(t, err, vocab.ErrorRateLimited, authority.LimitAccountsPerIP)
	// The fleet's registrations from the address have a bucket of their
	// own, at the fleet's rate.
	var fleetClients []*rawClient
	for i := range 2 {
		c := newClient()
		a, err := registerWith(ctx, c, &fleet)
		if err != nil {
			t.Fatalf("fleet account %d: %v", i+1, err)
		}
		fleetClients = append(fleetClients, &rawClient{t: t, e: e, key: c.Key, kid: a.URI})
	}
	fc := fleetClients[0]
	for i := range 3 {
		fc.order(dnsID(fmt.Sprintf("f%d.example.com", i)))
	}
	wantRateLimited(t, fc.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("f9.example.com")}}, jwsOpts{}),
		authority.LimitOrdersPerAccount, 20*time.Minute)
	b := &rawClient{t: t, e: e, key: bare.Key, kid: string(bare.KID)}
	b.order(dnsID("b0.example.com"))
	wantRateLimited(t, b.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("b1.example.com")}}, jwsOpts{}),
		authority.LimitOrdersPerAccount, time.Hour)
}

// A new-order over several limits at once is answered for the one that
// holds it longest, as Boulder's BatchSpend answers its strictest
// decision: a client that waits the Retry-After it is given gets in, and
// is not refused again by the limit the first answer left out.
func TestARequestOverSeveralLimitsIsToldTheLongestWaitAndGetsInAfterIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e, clk, _ := limitEnv(t, func(l *LimitsConfig) {
			l.OrdersPerAccount = rate(2, 2*time.Minute) // refills a unit a minute
			l.FailedValidations = rate(1, time.Hour)    // refills a unit an hour
		})
		c := e.rawClient()
		c.register()
		o := c.order(dnsID("fails.example.com"))
		c.answerHTTP01(o.Authorizations[0], "a wrong answer")
		c.await(o.Authorizations[0], "invalid")
		c.order(dnsID("other.example.com")) // orders_per_account is empty now
		newOrder := func() rawResponse {
			return c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("fails.example.com")}}, jwsOpts{})
		}
		r := newOrder()
		wantRateLimited(t, r, authority.LimitFailedValidations, time.Hour)
		if got := r.header.Get("Retry-After"); got != "3600" {
			t.Fatalf("Retry-After %q; want 3600, when failed_validations (the later of the two limits it is over) has room", got)
		}
		clk.Advance(time.Hour)
		if r := newOrder(); r.status != http.StatusCreated {
			t.Fatalf("after the Retry-After: %d %s; want 201", r.status, r.body)
		}
	})
}

// The detail's wait is the Retry-After's, rounded up to whole seconds as
// the header is: never "retry after 0s", never a second short of it.
func TestARefusalsDetailStatesTheRetryAfterItSends(t *testing.T) {
	e, clk, _ := limitEnv(t, func(l *LimitsConfig) { l.OrdersPerAccount = rate(1, time.Minute) })
	c := e.rawClient()
	c.register()
	c.order(dnsID("a.example.com"))
	refill := clk.Now().Add(time.Minute) // the bucket has room again
	for _, early := range []time.Duration{2400 * time.Millisecond, 400 * time.Millisecond} {
		clk.Advance(refill.Add(-early).Sub(clk.Now()))
		r := c.post(e.url("/new-order"), map[string]any{"identifiers": []any{dnsID("b.example.com")}}, jwsOpts{})
		wantRateLimited(t, r, authority.LimitOrdersPerAccount, time.Minute)
		if want := "retry after " + r.header.Get("Retry-After") + "s"; !strings.HasSuffix(r.problem.Detail, want) {
			t.Errorf("%s early: detail %q; want it to end %q, as its Retry-After header says", early, r.problem.Detail, want)
		}
	}
}
