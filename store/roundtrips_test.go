package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// statementCounter is a pgx tracer counting the statements sent, BEGIN
// and COMMIT included: each is a round trip to the server.
type statementCounter struct {
	mu   sync.Mutex
	n    int
	sent []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.sent = append(c.sent, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch, its statements sent at once in a
// pipeline, as one round trip (statements still to be prepared on the
// connection take one more, once).
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	var stmts []string
	for _, q := range d.Batch.QueuedQueries {
		stmts = append(stmts, strings.Join(strings.Fields(q.SQL), " "))
	}
	c.sent = append(c.sent, "batch: "+strings.Join(stmts, "; "))
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// since returns the statements counted since the mark, and a new mark.
func (c *statementCounter) since(mark int) (int, []string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n - mark, append([]string(nil), c.sent[mark:]...), c.n
}

// The store's part of one certificate on PostgreSQL, as a server makes it
// — a signed request's nonce spent with its account read, the order with
// its limits, the authorization read, the challenge started and completed,
// the order claimed and issued — takes no more round trips than its
// budget: each is a wake-up of two processes on the server's cores. The
// budget is what the store takes now (see docs/performance-log.md); a change
// that adds one fails here, to be weighed.
func TestACertificateTakesNoMoreRoundTripsToPostgresThanItsBudget(t *testing.T) {
	ctx := context.Background()
	counter := &statementCounter{}
	db, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{tracer: counter})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		name   string
		budget int
		do     func() error
	}
	var (
		o Order
		a Authz
	)
	nonce := func() error {
		_, fresh, err := db.UseNonceAs(ctx, NewID(), t0.Add(time.Hour), "p", acct.ID)
		if err == nil && !fresh {
			err = fmt.Errorf("a fresh nonce was refused")
		}
		return err
	}
	id := acme.Identifier{Type: "dns", Value: "www.example.com"}
	steps := []step{
		{"a signed request's nonce", 1, nonce},
		{"new-order with its limits", 1, func() (err error) {
			// A server's spends: the cap, the account's orders, the
			// identifier's failed validations (only checked) and the
			// order's duplicates.
			spends := []LimitSpend{
				{Key: pendingBoundKey("p", acct.ID), Burst: 1000, Cost: 1, PendingAuthzs: true},
				{Key: "orders:" + acct.ID, Emission: time.Millisecond, Burst: 1000, Cost: 1},
				{Key: "failed:" + acct.ID + ":" + id.Value, Emission: time.Millisecond, Burst: 1000, Cost: 1, CheckOnly: true},
				{Key: "duplicates:" + acct.ID + ":" + id.Value, Emission: time.Millisecond, Burst: 1000, Cost: 1},
			}
			o, err = db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Expires: t0.Add(time.Hour)},
				[]Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []Challenge{
					{Type: "http-01", Token: NewID()}, {Type: "dns-01", Token: NewID()}, {Type: "tls-alpn-01", Token: NewID()}}}}, t0, spends...)
			return err
		}},
		// A request that names its first read (store.FirstRead) spends
		// its nonce and reads in one pipeline.
		{"a signed request's nonce and its first read, the authorization", 1, func() (err error) {
			ctx := WithFirstRead(ctx, FirstReadOfAuthz(o.AuthzIDs[0]))
			if _, fresh, err := db.UseNonceAs(ctx, NewID(), t0.Add(time.Hour), "p", acct.ID); err != nil || !fresh {
				return fmt.Errorf("fresh=%v: %w", fresh, err)
			}
			a, err = db.GetAuthz(ctx, "p", o.AuthzIDs[0])
			return err
		}},
		{"the challenge started", 1, func() error {
			if ok, err := db.StartChallenge(ctx, a.Challenges[0].ID, t0); err != nil || !ok {
				return fmt.Errorf("started=%v: %w", ok, err)
			}
			return nil
		}},
		{"the challenge completed", 1, func() error {
			res, err := db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, t0)
			if err == nil && res.OrderStatus != acme.StatusReady {
				err = fmt.Errorf("the order is %s, want ready", res.OrderStatus)
			}
			return err
		}},
		{"the order claimed for issue", 1, func() error {
			if ok, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), OrderClient{}, "", t0); err != nil || !ok {
				return fmt.Errorf("claimed=%v: %w", ok, err)
			}
			return nil
		}},
		{"the certificate stored", 1, func() error {
			_, err := db.IssueOrder(ctx, Certificate{OrderID: o.ID, Profile: "p", AccountID: acct.ID, Serial: NewID()[20:], ChainPEM: "-",
				PublicKey: []byte{1}, NotBefore: t0, NotAfter: t0.Add(time.Hour)},
				AuditEvent{At: t0, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID}, t0,
				// The certificate's unit of duplicate_certificates, in the same statement.
				LimitSpend{Key: "duplicate_certificates/p/" + acct.ID + "/" + o.ID, Emission: time.Minute, Burst: 300, Cost: 1})
			return err
		}},
	}
	// Once for the statements' preparation, then counted.
	for round := range 2 {
		_, _, mark := counter.since(0)
		for _, s := range steps {
			if err := s.do(); err != nil {
				t.Fatalf("round %d, %s: %v", round, s.name, err)
			}
			n, sent, next := counter.since(mark)
			mark = next
			if round == 1 && n > s.budget {
				t.Errorf("%s took %d round trips, over its budget of %d:\n\t%s", s.name, n, s.budget, strings.Join(sent, "\n\t"))
			}
		}
		if round == 0 {
			id.Value = "www2.example.com"
		}
	}
}
