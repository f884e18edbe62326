package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func mintTestKey(t *testing.T, db *DB, kid string, reusable bool, expires time.Time) {
	t.Helper()
	if err := db.CreateEABKey(context.Background(), EABKey{KID: kid, Profile: "p", Label: "label-" + kid,
		HMACKey: []byte("mac-" + kid), Reusable: reusable, Created: t0, Expires: expires}); err != nil {
		t.Fatal(err)
	}
}

func bindAccount(db *DB, n int, kid string, at time.Time) (Account, bool, error) {
	return db.CreateAccount(context.Background(), Account{Profile: "p", Thumbprint: fmt.Sprintf("tp%d", n), KeyJWK: []byte("{}"),
		EABKID: kid, EABLabel: "label-" + kid}, at)
}

func TestAnEABKeyBindsWhatItsStateAllows(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	mintTestKey(t, db, "once", false, time.Time{})
	mintTestKey(t, db, "many", true, time.Time{})
	mintTestKey(t, db, "short", false, t0.Add(time.Hour))
	mintTestKey(t, db, "gone", false, time.Time{})
	if _, err := db.RevokeEABKey(ctx, "p", "gone", t0); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		kid  string
		at   time.Time
		ok   bool
	}{
		{"a single-use key binds a first account", "once", t0, true},
		{"a single-use key binds no second account", "once", t0, false},
		{"a reusable key binds a first account", "many", t0, true},
		{"a reusable key binds a second account", "many", t0, true},
		{"a key past its expiry binds nothing", "short", t0.Add(time.Hour), false},
		{"a key before its expiry binds", "short", t0.Add(time.Hour - time.Millisecond), true},
		{"a revoked key binds nothing", "gone", t0, false},
		{"an unknown key binds nothing", "nope", t0, false},
	}
	for i, c := range cases {
		a, created, err := bindAccount(db, i, c.kid, c.at)
		if c.ok != (err == nil && created) {
			t.Errorf("%s: created %v, err %v", c.name, created, err)
		}
		if !c.ok {
			if !errors.Is(err, ErrWrongState) {
				t.Errorf("%s: err %v; want ErrWrongState", c.name, err)
			}
			if _, err := db.AccountByKey(ctx, "p", fmt.Sprintf("tp%d", i)); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: the refused account was stored (%v)", c.name, err)
			}
			continue
		}
		got, err := db.GetAccount(ctx, "p", a.ID)
		if err != nil || got.EABKID != c.kid || got.EABLabel != "label-"+c.kid {
			t.Errorf("%s: account %+v %v; want bound to %s with its label", c.name, got, err, c.kid)
		}
	}
	keys, err := db.ListEABKeys(ctx, EABKeyFilter{Profile: "p"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]EABState{"once": EABBound, "many": EABInUse, "short": EABExpired, "gone": EABRevoked}
	for _, k := range keys {
		if len(k.HMACKey) != 0 {
			t.Errorf("key %s: the listing carries its MAC key", k.KID)
		}
		if st := k.State(t0.Add(time.Hour)); st != want[k.KID] {
			t.Errorf("key %s: state %s; want %s", k.KID, st, want[k.KID])
		}
	}
	if len(keys) != len(want) {
		t.Errorf("listed %d keys; want %d", len(keys), len(want))
	}
}

// Two registrations racing for a single-use key bind it once, on either
// database: the binding is a guarded update in the account's creation.
func TestTwoRegistrationsRacingForASingleUseKeyBindOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		mintTestKey(t, db, "once", false, time.Time{})
		const n = 8
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := bindAccount(db, i, "once", t0)
				if err != nil && !errors.Is(err, ErrWrongState) {
					t.Errorf("registration %d: %v", i, err)
				}
				if ok {
					mu.Lock()
					created++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if created != 1 {
			t.Fatalf("%d accounts bound the single-use key; want 1", created)
		}
		keys, err := db.ListEABKeys(context.Background(), EABKeyFilter{Profile: "p"})
		if err != nil || len(keys) != 1 || keys[0].BoundCount != 1 {
			t.Fatalf("keys %+v %v; want one bound once", keys, err)
		}
	})
}

func TestRevokingAnEABKeyTwiceOrAnUnknownOneIsRefused(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	mintTestKey(t, db, "k", false, time.Time{})
	if _, err := db.RevokeEABKey(ctx, "p", "k", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RevokeEABKey(ctx, "p", "k", t0); !errors.Is(err, ErrWrongState) {
		t.Errorf("second revoke: %v; want ErrWrongState", err)
	}
	if _, err := db.RevokeEABKey(ctx, "other", "k", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoke in another profile: %v; want ErrNotFound", err)
	}
	if err := db.CreateEABKey(ctx, EABKey{KID: "k", Profile: "p", Label: "x", HMACKey: []byte{1}, Created: t0}); !errors.Is(err, ErrConflict) {
		t.Errorf("minting a taken kid: %v; want ErrConflict", err)
	}
}

func TestAnOrderShowsTheLabelOfItsAccountsBinding(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	mintTestKey(t, db, "k", false, time.Time{})
	bound, _, err := bindAccount(db, 1, "k", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.RevokeEABKey(ctx, "p", "k", t0); err != nil { // the label outlives the key
		t.Fatal(err)
	}
	bare, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "bare", KeyJWK: []byte("{}")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for acct, label := range map[string]string{bound.ID: "label-k", bare.ID: ""} {
		o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct, Identifiers: nil, Expires: t0.Add(time.Hour)}, nil, t0)
		if err != nil {
			t.Fatal(err)
		}
		want[o.ID] = label
	}
	orders, err := db.ListOrders(ctx, OrderFilter{Profile: "p"})
	if err != nil || len(orders) != 2 {
		t.Fatalf("orders %d %v", len(orders), err)
	}
	for _, o := range orders {
		if o.AccountEABLabel != want[o.ID] {
			t.Errorf("order %s: label %q; want %q", o.ID, o.AccountEABLabel, want[o.ID])
		}
		one, err := db.OrderByID(ctx, o.ID)
		if err != nil || one.AccountEABLabel != want[o.ID] {
			t.Errorf("order %s by id: label %q %v; want %q", o.ID, one.AccountEABLabel, err, want[o.ID])
		}
	}
}

// The EAB key list is paged as the orders list is: newest first, a page
// of at most the limit (100 by default), the next page after the key the
// cursor names — keys minted in one millisecond ordered by key id, so a
// page boundary between them loses or repeats none.
func TestTheEABKeyListIsPagedNewestFirstAfterTheKeyTheCursorNames(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		mintAt := func(profile, kid string, at time.Time) {
			t.Helper()
			if err := db.CreateEABKey(ctx, EABKey{KID: kid, Profile: profile, Label: "l", HMACKey: []byte("mac"), Created: at}); err != nil {
				t.Fatal(err)
			}
		}
		// k000 … k104, one a minute, k104 the newest; k050 to k052 in
		// one millisecond; another profile's key newer than them all.
		var kids []string
		for i := range 105 {
			kid := fmt.Sprintf("k%03d", i)
			at := t0.Add(time.Duration(i) * time.Minute)
			if i >= 50 && i <= 52 {
				at = t0.Add(50 * time.Minute)
			}
			mintAt("p", kid, at)
			kids = append(kids, kid)
		}
		mintAt("other", "z-other", t0.Add(24*time.Hour))
		newest := func(from, n int) []string { // kids[from], kids[from-1], … n of them
			var out []string
			for i := from; i > from-n && i >= 0; i-- {
				out = append(out, kids[i])
			}
			return out
		}
		tests := []struct {
			name string
			f    EABKeyFilter
			want []string
		}{
			{"ok/the first page, newest first", EABKeyFilter{Profile: "p", Limit: 3}, newest(104, 3)},
			{"ok/the page after a key", EABKeyFilter{Profile: "p", After: "k102", Limit: 3}, newest(101, 3)},
			{"ok/a page that starts among keys of one millisecond", EABKeyFilter{Profile: "p", After: "k052", Limit: 2}, newest(51, 2)},
			{"ok/a page that ends among keys of one millisecond", EABKeyFilter{Profile: "p", After: "k051", Limit: 3}, newest(50, 3)},
			{"ok/without a limit, a page of 100", EABKeyFilter{Profile: "p"}, newest(104, 100)},
			{"ok/a limit past the most is the most", EABKeyFilter{Profile: "p", Limit: MaxPage + 1}, newest(104, 105)},
			{"ok/the last page", EABKeyFilter{Profile: "p", After: "k002", Limit: 10}, newest(1, 2)},
			{"ok/after the oldest key, none", EABKeyFilter{Profile: "p", After: "k000"}, nil},
			{"ok/after a key that does not exist, none", EABKeyFilter{Profile: "p", After: "nope"}, nil},
			{"ok/another profile's keys only", EABKeyFilter{Profile: "other"}, []string{"z-other"}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				keys, err := db.ListEABKeys(ctx, tc.f)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, k := range keys {
					got = append(got, k.KID)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("%+v: %v; want %v", tc.f, got, tc.want)
				}
			})
		}
	})
}
