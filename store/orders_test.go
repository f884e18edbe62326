package store

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

func newOrderWithAuthzs(t *testing.T, db *DB, n int) Order {
	t.Helper()
	ctx := context.Background()
	acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	var authzs []Authz
	var idents []acme.Identifier
	for i := 0; i < n; i++ {
		id := acme.Identifier{Type: "dns", Value: string(rune('a'+i)) + ".example.com"}
		idents = append(idents, id)
		authzs = append(authzs, Authz{Identifier: id, Expires: t0.Add(time.Hour),
			Challenges: []Challenge{{Type: "http-01", Token: NewID()}}})
	}
	o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: idents, Expires: t0.Add(time.Hour)}, authzs, t0)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func challengeOf(t *testing.T, db *DB, authzID string) Challenge {
	t.Helper()
	a, err := db.GetAuthz(context.Background(), "p", authzID)
	if err != nil {
		t.Fatal(err)
	}
	return a.Challenges[0]
}

func TestConcurrentValidationOfTheLastTwoAuthorizationsMakesTheOrderReadyOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		// Two connections open already, so that neither validation waits
		// for one while the other commits.
		if errs := concurrently(4, func(int) error { _, err := db.UseNonce(ctx, NewID(), t0); return err }); errors.Join(errs...) != nil {
			t.Fatal(errors.Join(errs...))
		}
		for round := 0; round < 20; round++ {
			o := newOrderWithAuthzs(t, db, 2)
			var chals []Challenge
			for _, aid := range o.AuthzIDs {
				c := challengeOf(t, db, aid)
				if ok, err := db.StartChallenge(ctx, c.ID, t0); err != nil || !ok {
					t.Fatalf("start: %v %v", ok, err)
				}
				chals = append(chals, c)
			}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				changed int
				start   = make(chan struct{})
			)
			for _, c := range chals {
				wg.Add(1)
				go func(id string) {
					defer wg.Done()
					<-start
					res, err := db.CompleteChallenge(ctx, id, true, nil, t0)
					if err != nil {
						t.Error(err)
						return
					}
					if res.OrderChanged {
						mu.Lock()
						changed++
						mu.Unlock()
					}
				}(c.ID)
			}
			close(start)
			wg.Wait()
			if changed != 1 {
				t.Fatalf("round %d: the order was promoted %d times, want once", round, changed)
			}
			got, _ := db.GetOrder(ctx, "p", o.ID)
			if got.Status != "ready" {
				t.Fatalf("round %d: order is %s, want ready", round, got.Status)
			}
		}
	})
}

// RFC 8555 §7.1.6: an order becomes ready once every one of its
// authorizations is valid, and invalid once any of them is invalid; an
// invalid order stays invalid whatever its other authorizations do.
func TestAnOrderIsNotReadyUntilEveryAuthorizationIsValid(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		for _, tc := range []struct {
			name string
			// valid is each authorization's validation result, in the order
			// they are completed; want the order's status after each.
			valid []bool
			want  []string
		}{
			{"two names, both valid", []bool{true, true}, []string{"pending", "ready"}},
			{"three names, all valid", []bool{true, true, true}, []string{"pending", "pending", "ready"}},
			{"one valid, then one invalid", []bool{true, false}, []string{"pending", "invalid"}},
			{"one invalid, then one valid", []bool{false, true}, []string{"invalid", "invalid"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				o := newOrderWithAuthzs(t, db, len(tc.valid))
				before := "pending"
				for i, valid := range tc.valid {
					c := challengeOf(t, db, o.AuthzIDs[i])
					if ok, err := db.StartChallenge(ctx, c.ID, t0); err != nil || !ok {
						t.Fatalf("starting challenge %d: %v %v", i, ok, err)
					}
					var problem []byte
					if !valid {
						problem = []byte(`{"type":"x"}`)
					}
					res, err := db.CompleteChallenge(ctx, c.ID, valid, problem, t0)
					if err != nil {
						t.Fatalf("completing challenge %d: %v", i, err)
					}
					if string(res.OrderStatus) != tc.want[i] || res.OrderChanged != (tc.want[i] != before) {
						t.Errorf("after authorization %d (valid=%v) the result is %+v, want order %s (changed: %v)",
							i, valid, res, tc.want[i], tc.want[i] != before)
					}
					got, err := db.GetOrder(ctx, "p", o.ID)
					if err != nil {
						t.Fatal(err)
					}
					if string(got.Status) != tc.want[i] {
						t.Errorf("after authorization %d (valid=%v) the order reads %s, want %s", i, valid, got.Status, tc.want[i])
					}
					before = tc.want[i]
				}
			})
		}
	})
}

func TestAFailedChallengeInvalidatesItsAuthorizationAndOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := newOrderWithAuthzs(t, db, 2)
		c := challengeOf(t, db, o.AuthzIDs[0])
		db.StartChallenge(ctx, c.ID, t0)
		res, err := db.CompleteChallenge(ctx, c.ID, false, []byte(`{"type":"x"}`), t0)
		if err != nil || res.OrderStatus != "invalid" || !res.OrderChanged {
			t.Fatalf("complete: %+v %v", res, err)
		}
		if _, err := db.CompleteChallenge(ctx, c.ID, true, nil, t0); !errors.Is(err, ErrWrongState) {
			t.Fatalf("completing twice: %v, want ErrWrongState", err)
		}
		a, _ := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
		if a.Status != "invalid" || string(a.Challenges[0].Error) != `{"type":"x"}` {
			t.Fatalf("authz after failure: %+v", a)
		}
	})
}

// Concurrent finalizes of one ready order — from one process, or from
// several processes sharing the database, each with a store of its
// own — claim it through ClaimOrderForIssue: exactly one claim wins, and
// the order keeps the winner's CSR.
func TestExactlyOneOfConcurrentClaimsOfAReadyOrderWins(t *testing.T) {
	eachDialect(t, testExactlyOneOfConcurrentClaimsOfAReadyOrderWins)
}

func testExactlyOneOfConcurrentClaimsOfAReadyOrderWins(t *testing.T) {
	const claimers = 16
	for _, tc := range []struct {
		name    string
		handles int
	}{
		{"through one store", 1},
		{"through stores of several processes on one database", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			place := newPlace(t)
			dbs := make([]*DB, tc.handles)
			for i := range dbs {
				dbs[i] = openAt(t, place)
			}
			o := newOrderWithAuthzs(t, dbs[0], 1)
			c := challengeOf(t, dbs[0], o.AuthzIDs[0])
			if ok, err := dbs[0].StartChallenge(ctx, c.ID, t0); err != nil || !ok {
				t.Fatalf("start: %v %v", ok, err)
			}
			if res, err := dbs[0].CompleteChallenge(ctx, c.ID, true, nil, t0); err != nil || res.OrderStatus != "ready" {
				t.Fatalf("complete: %+v %v", res, err)
			}

			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				won   = make([]bool, claimers)
			)
			for i := range claimers {
				wg.Go(func() {
					<-start
					var err error
					won[i], err = dbs[i%len(dbs)].ClaimOrderForIssue(ctx, o.ID, []byte{byte(i)}, OrderClient{}, "", t0)
					if err != nil {
						t.Errorf("claim %d: %v", i, err)
					}
				})
			}
			close(start)
			wg.Wait()

			winner := -1
			for i, w := range won {
				if !w {
					continue
				}
				if winner >= 0 {
					t.Fatalf("claims %d and %d both won", winner, i)
				}
				winner = i
			}
			if winner < 0 {
				t.Fatal("no claim won")
			}
			got, err := dbs[0].GetOrder(ctx, "p", o.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != "processing" || !bytes.Equal(got.CSR, []byte{byte(winner)}) {
				t.Errorf("order is %s with CSR %v, want processing with the winner's CSR %v", got.Status, got.CSR, []byte{byte(winner)})
			}
		})
	}
}

func TestAnExpiredOrderCannotBeClaimedForIssue(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := newOrderWithAuthzs(t, db, 1)
		c := challengeOf(t, db, o.AuthzIDs[0])
		db.StartChallenge(ctx, c.ID, t0)
		db.CompleteChallenge(ctx, c.ID, true, nil, t0)
		if won, err := db.ClaimOrderForIssue(ctx, o.ID, nil, OrderClient{}, "", t0.Add(2*time.Hour)); err != nil || won {
			t.Fatalf("claim after expiry: won=%v err=%v", won, err)
		}
	})
}

func TestAccountsAreUniquePerProfileAndKey(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		a1, created, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "k", KeyJWK: []byte(`{}`)}, t0)
		if err != nil || !created {
			t.Fatal(err)
		}
		a2, created, _ := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "k", KeyJWK: []byte(`{}`)}, t0)
		if created || a2.ID != a1.ID {
			t.Fatalf("same key twice made a new account")
		}
		a3, created, _ := db.CreateAccount(ctx, Account{Profile: "q", Thumbprint: "k", KeyJWK: []byte(`{}`)}, t0)
		if !created || a3.ID == a1.ID {
			t.Fatalf("the same key in another profile must be another account")
		}
		if _, err := db.GetAccount(ctx, "q", a1.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("account of profile p visible in profile q: %v", err)
		}
	})
}

func TestANonceCanBeUsedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		if fresh, err := db.UseNonce(ctx, "n1", t0.Add(time.Hour)); err != nil || !fresh {
			t.Fatalf("first use: %v %v", fresh, err)
		}
		if fresh, err := db.UseNonce(ctx, "n1", t0.Add(time.Hour)); err != nil || fresh {
			t.Fatalf("second use: fresh=%v err=%v; want refused", fresh, err)
		}
		if n, err := db.PruneNonces(ctx, t0.Add(time.Hour+NonceSweepMargin+time.Second)); err != nil || n != 1 {
			t.Fatalf("prune: %d %v", n, err)
		}
	})
}

// A nonce carries its expiry, which each instance reads in its own clock;
// its spent record is what refuses a replay. The sweep, in the clock of
// whichever instance runs it, keeps the record NonceSweepMargin past the
// expiry, so that an instance whose clock runs behind the sweeper's (by
// less than that) still refuses the nonce as spent rather than take it
// as fresh.
func TestASpentNonceIsKeptPastItsExpiryForInstancesWhoseClocksRunBehind(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		expires := t0.Add(time.Hour)
		if fresh, err := db.UseNonce(ctx, "n1", expires); err != nil || !fresh {
			t.Fatalf("first use: %v %v", fresh, err)
		}
		if _, err := db.PruneNonces(ctx, expires.Add(NonceSweepMargin-time.Second)); err != nil {
			t.Fatal(err)
		}
		if fresh, err := db.UseNonce(ctx, "n1", expires); err != nil || fresh {
			t.Fatalf("a replay after a sweep %s past its expiry: fresh=%v err=%v; want refused", NonceSweepMargin-time.Second, fresh, err)
		}
		if n, err := db.PruneNonces(ctx, expires.Add(NonceSweepMargin+time.Second)); err != nil || n != 1 {
			t.Fatalf("a sweep past the margin forgot %d nonces (%v); want 1", n, err)
		}
	})
}

func TestResourceIDsNeverLookLikeCommandLineFlags(t *testing.T) {
	for i := 0; i < 2000; i++ {
		id := NewID()
		if strings.HasPrefix(id, "-") || strings.ContainsAny(id, "/?#") || len(id) < 26 {
			t.Fatalf("id %q could be taken for a flag or break a URL", id)
		}
	}
}

func TestReadingAnOrderOrAuthorizationReturnsItsPartsInCreationOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		types := []string{"http-01", "dns-01", "tls-alpn-01"}
		var authzs []Authz
		var idents []acme.Identifier
		for _, name := range []string{"c.example.com", "a.example.com", "b.example.com"} {
			id := acme.Identifier{Type: "dns", Value: name}
			idents = append(idents, id)
			a := Authz{Identifier: id, Expires: t0.Add(time.Hour)}
			for _, ty := range types {
				a.Challenges = append(a.Challenges, Challenge{Type: ty, Token: NewID()})
			}
			authzs = append(authzs, a)
		}
		created, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: idents, Expires: t0.Add(time.Hour)}, authzs, t0)
		if err != nil {
			t.Fatal(err)
		}

		o, err := db.GetOrder(ctx, "p", created.ID)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(o.AuthzIDs, ",") != strings.Join(created.AuthzIDs, ",") {
			t.Errorf("authorizations %v, want %v (creation order)", o.AuthzIDs, created.AuthzIDs)
		}
		for i, id := range o.AuthzIDs {
			a, err := db.GetAuthz(ctx, "p", id)
			if err != nil {
				t.Fatal(err)
			}
			if a.Identifier != idents[i] || a.OrderID != o.ID || a.AccountID != acct.ID || !a.Expires.Equal(t0.Add(time.Hour)) {
				t.Errorf("authorization %d: %+v", i, a)
			}
			var got []string
			for _, c := range a.Challenges {
				got = append(got, c.Type)
				if c.AuthzID != id || c.Status != "pending" || c.Token == "" {
					t.Errorf("challenge %+v of authorization %s", c, id)
				}
			}
			if strings.Join(got, ",") != strings.Join(types, ",") {
				t.Errorf("challenges %v, want %v", got, types)
			}
		}

		for _, tc := range []struct {
			name string
			read func() error
		}{
			{"an unknown order", func() error { _, err := db.GetOrder(ctx, "p", "nope"); return err }},
			{"an order of another profile", func() error { _, err := db.GetOrder(ctx, "q", created.ID); return err }},
			{"an unknown authorization", func() error { _, err := db.GetAuthz(ctx, "p", "nope"); return err }},
			{"an authorization of another profile", func() error { _, err := db.GetAuthz(ctx, "q", o.AuthzIDs[0]); return err }},
		} {
			if err := tc.read(); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", tc.name, err)
			}
		}
	})
}

func TestAnOrdersCertificateProfileIsReadBackByEveryReaderOfTheOrder(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	id := acme.Identifier{Type: "dns", Value: "a.example.com"}
	mk := func(certProfile string) Order {
		o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: []acme.Identifier{id},
			Expires: t0.Add(time.Hour), CertificateProfile: certProfile},
			[]Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	client, none := mk("client"), mk("")
	for _, o := range []Order{client, none} {
		c, err := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := db.StartChallenge(ctx, c.Challenges[0].ID, t0); err != nil || !ok {
			t.Fatalf("start: %v %v", ok, err)
		}
		if _, err := db.CompleteChallenge(ctx, c.Challenges[0].ID, true, nil, t0); err != nil {
			t.Fatal(err)
		}
		if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, OrderClient{}, "", t0); err != nil || !won {
			t.Fatalf("claim: %v %v", won, err)
		}
	}
	want := map[string]string{client.ID: "client", none.ID: ""}
	for id, w := range want {
		o, err := db.GetOrder(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if o.CertificateProfile != w {
			t.Errorf("GetOrder(%s).CertificateProfile = %q, want %q", id, o.CertificateProfile, w)
		}
	}
	stuck, err := db.ReclaimStuckOrders(ctx, "p", t0.Add(time.Minute), t0.Add(time.Minute), 10, "signer_issue", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stuck) != 2 {
		t.Fatalf("%d stuck orders reclaimed, want 2", len(stuck))
	}
	for _, o := range stuck {
		if o.CertificateProfile != want[o.ID] {
			t.Errorf("reclaimed order %s has certificate profile %q, want %q", o.ID, o.CertificateProfile, want[o.ID])
		}
	}
}

// An order left processing is resumed by the sweep unless a live job of
// the kind named keeps it — a worker's signer_issue job, which will sign
// it: resuming it beside that job would sign it twice. A job of another
// kind, or one settled, keeps nothing.
//
// The same holds for an order whose claimer has exited, reclaimed however
// recently it was claimed.
func TestAStuckOrderIsNotReclaimedWhileALiveJobOfTheNamedKindWillFinishIt(t *testing.T) {
	reclaims := []struct {
		name    string
		reclaim func(ctx context.Context, db *DB) ([]Order, error)
	}{
		{"by age", func(ctx context.Context, db *DB) ([]Order, error) {
			later := t0.Add(10 * time.Minute)
			return db.ReclaimStuckOrders(ctx, "p", later.Add(-5*time.Minute), later, 10, "signer_issue", "")
		}},
		{"by an exited claimer", func(ctx context.Context, db *DB) ([]Order, error) {
			return db.ReclaimOrdersClaimedBy(ctx, "p", "dead", t0.Add(time.Second), 10, "signer_issue", "")
		}},
	}
	for _, rc := range reclaims {
		t.Run(rc.name, func(t *testing.T) { reclaimUnlessALiveJob(t, rc.reclaim) })
	}
}

func reclaimUnlessALiveJob(t *testing.T, reclaim func(ctx context.Context, db *DB) ([]Order, error)) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name    string
			job     *NewJob // keyed by the order; nil for none
			settle  bool    // the job is done before the sweep
			cancel  bool    // an operator cancels the waiting job before the sweep
			reclaim bool
		}{
			{"an order with no job is reclaimed", nil, false, false, true},
			{"an order whose job is waiting is left to it", &NewJob{Kind: "signer_issue"}, false, false, false},
			{"an order whose job is done is reclaimed", &NewJob{Kind: "signer_issue"}, true, false, true},
			{"an order whose cancelled job still owes its Abandon is left to that Abandon", &NewJob{Kind: "signer_issue"}, false, true, false},
			{"a job of another kind keeps nothing", &NewJob{Kind: "notify_deliver"}, false, false, true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
				if err != nil {
					t.Fatal(err)
				}
				o := claimedOrder(t, db, acct.ID, "dead")
				if tt.job != nil {
					nj := *tt.job
					nj.Key, nj.RunAt, nj.MaxAttempts = o.ID, t0, 3
					j, _, err := db.EnqueueJob(ctx, nj, t0)
					if err != nil {
						t.Fatal(err)
					}
					if tt.settle {
						claimed, err := db.ClaimJobs(ctx, nj.Kind, "w", t0, t0.Add(time.Minute), 1)
						if err != nil || len(claimed) != 1 {
							t.Fatalf("claim job: %v %v", claimed, err)
						}
						if _, err := db.CompleteJob(ctx, j.ID, "w", t0); err != nil {
							t.Fatal(err)
						}
					}
					if tt.cancel {
						if cancelled, err := db.CancelJob(ctx, j.ID, t0); err != nil || !cancelled.AbandonOwed {
							t.Fatalf("cancel: %+v %v", cancelled, err)
						}
					}
				}
				stuck, err := reclaim(ctx, db)
				if err != nil {
					t.Fatal(err)
				}
				if got := len(stuck) == 1; got != tt.reclaim {
					t.Errorf("reclaimed %d orders; want the order reclaimed: %v", len(stuck), tt.reclaim)
				}
			})
		}
	})
}

// A restarted process takes over the processing orders its exited
// predecessor claimed, however recent the claim, and only those: one
// claimed by a process still running stays with it until StuckAfter. The
// takeover records the new claimer, so a second taker finds nothing, and
// the orders are the new claimer's should it exit in turn.
func TestTheOrdersAnExitedProcessClaimedAreReclaimedAtOnceAndOnlyThose(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		dead, live := claimedOrder(t, db, acct.ID, "dead").ID, claimedOrder(t, db, acct.ID, "live").ID
		now := t0.Add(time.Second)
		ids := func(os []Order) []string {
			var out []string
			for _, o := range os {
				out = append(out, o.ID)
			}
			return out
		}
		steps := []struct {
			name    string
			reclaim func() ([]Order, error)
			want    []string
		}{
			{"a second after the claims, nothing is stuck", func() ([]Order, error) {
				return db.ReclaimStuckOrders(ctx, "p", now.Add(-5*time.Minute), now, 10, "signer_issue", "restarted")
			}, nil},
			{"the exited claimer's order is taken", func() ([]Order, error) {
				return db.ReclaimOrdersClaimedBy(ctx, "p", "dead", now, 10, "signer_issue", "restarted")
			}, []string{dead}},
			{"once", func() ([]Order, error) {
				return db.ReclaimOrdersClaimedBy(ctx, "p", "dead", now, 10, "signer_issue", "other")
			}, nil},
			{"another profile's are not", func() ([]Order, error) {
				return db.ReclaimOrdersClaimedBy(ctx, "q", "live", now, 10, "signer_issue", "restarted")
			}, nil},
			{"it is now the new claimer's", func() ([]Order, error) {
				return db.ReclaimOrdersClaimedBy(ctx, "p", "restarted", now, 10, "signer_issue", "third")
			}, []string{dead}},
			{"the running claimer's order waits for StuckAfter, the one taken over counts from the takeover", func() ([]Order, error) {
				later := t0.Add(5*time.Minute + 500*time.Millisecond)
				return db.ReclaimStuckOrders(ctx, "p", later.Add(-5*time.Minute), later, 10, "signer_issue", "restarted")
			}, []string{live}},
		}
		for _, st := range steps {
			got, err := st.reclaim()
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if !slices.Equal(ids(got), st.want) {
				t.Errorf("%s: reclaimed %v, want %v", st.name, ids(got), st.want)
			}
		}
	})
}

// claimedOrder is a new order of account acct in profile "p" for a name of
// its own, its challenge valid, claimed for issuance at t0 by claimer.
func claimedOrder(t *testing.T, db *DB, acct, claimer string) Order {
	t.Helper()
	ctx := context.Background()
	id := acme.Identifier{Type: "dns", Value: NewID() + ".example.com"}
	o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct, Identifiers: []acme.Identifier{id}, Expires: t0.Add(time.Hour)},
		[]Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, t0); err != nil {
		t.Fatal(err)
	}
	if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, OrderClient{}, claimer, t0); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	return o
}
