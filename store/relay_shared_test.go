package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestAnHTTPTokenPublishedByOneInstanceIsReadByAnotherUntilWithdrawn(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		a, b := openAt(t, place), openAt(t, place)
		tok := RelayHTTPToken{Token: "tok1", Identifier: "a.example.com", KeyAuth: "tok1.thumb", Expires: t0.Add(time.Hour)}
		if err := a.PutRelayHTTPToken(ctx, tok, t0); err != nil {
			t.Fatal(err)
		}
		got, err := b.GetRelayHTTPToken(ctx, "tok1", t0.Add(time.Minute))
		if err != nil {
			t.Fatalf("the other instance: %v", err)
		}
		if got.Identifier != tok.Identifier || got.KeyAuth != tok.KeyAuth || !got.Expires.Equal(tok.Expires) {
			t.Errorf("read %+v, want %+v", got, tok)
		}
		if _, err := b.GetRelayHTTPToken(ctx, "tok2", t0); !errors.Is(err, ErrNotFound) {
			t.Errorf("an unknown token: %v, want ErrNotFound", err)
		}
		if err := a.DeleteRelayHTTPToken(ctx, "tok1"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.GetRelayHTTPToken(ctx, "tok1", t0); !errors.Is(err, ErrNotFound) {
			t.Errorf("a withdrawn token: %v, want ErrNotFound", err)
		}
		if err := a.DeleteRelayHTTPToken(ctx, "tok1"); err != nil {
			t.Errorf("withdrawing it again: %v", err)
		}
	})
}

func TestAnExpiredHTTPTokenIsNotAnsweredAndIsSweptByTheNextPublication(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		old := RelayHTTPToken{Token: "old", Identifier: "a.example.com", KeyAuth: "old.k", Expires: t0.Add(time.Minute)}
		if err := db.PutRelayHTTPToken(ctx, old, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.GetRelayHTTPToken(ctx, "old", t0.Add(time.Minute)); !errors.Is(err, ErrNotFound) {
			t.Errorf("at its expiry: %v, want ErrNotFound", err)
		}
		fresh := RelayHTTPToken{Token: "new", Identifier: "b.example.com", KeyAuth: "new.k", Expires: t0.Add(time.Hour)}
		if err := db.PutRelayHTTPToken(ctx, fresh, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.r.QueryRow(`SELECT COUNT(*) FROM relay_http_tokens`).Scan(&n); err != nil || n != 1 {
			t.Errorf("rows after the next publication: %d (%v), want only the fresh one", n, err)
		}
	})
}

func TestARepublishedHTTPTokenAnswersItsNewKeyAuthorization(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		tok := RelayHTTPToken{Token: "t", Identifier: "a.example.com", KeyAuth: "t.one", Expires: t0.Add(time.Hour)}
		if err := db.PutRelayHTTPToken(ctx, tok, t0); err != nil {
			t.Fatal(err)
		}
		tok.KeyAuth = "t.two"
		if err := db.PutRelayHTTPToken(ctx, tok, t0); err != nil {
			t.Fatalf("publishing again: %v", err)
		}
		if got, err := db.GetRelayHTTPToken(ctx, "t", t0); err != nil || got.KeyAuth != "t.two" {
			t.Errorf("got %+v, %v; want key authorization t.two", got, err)
		}
	})
}

func TestInstancesCreatingARelayAccountAtOnceEndUpWithTheFirstKey(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		a, b := openAt(t, place), openAt(t, place)
		if _, err := a.GetRelayAccount(ctx, "up", "p"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before: %v, want ErrNotFound", err)
		}
		first, err := a.CreateRelayAccount(ctx, RelayAccount{Upstream: "up", Profile: "p", KeyPEM: "key A"}, t0)
		if err != nil || first.KeyPEM != "key A" {
			t.Fatalf("first: %+v %v", first, err)
		}
		second, err := b.CreateRelayAccount(ctx, RelayAccount{Upstream: "up", Profile: "p", KeyPEM: "key B"}, t0)
		if err != nil || second.KeyPEM != "key A" {
			t.Errorf("second creator got %+v, %v; want the first key", second, err)
		}
		other, err := b.CreateRelayAccount(ctx, RelayAccount{Upstream: "up", Profile: "q", KeyPEM: "key Q"}, t0)
		if err != nil || other.KeyPEM != "key Q" {
			t.Errorf("another profile got %+v, %v; want its own key", other, err)
		}

		if err := b.SetRelayAccountRegistration(ctx, "up", "p", "https://up/acct/1", []string{"mailto:x@example.com"}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := a.GetRelayAccount(ctx, "up", "p")
		if err != nil || got.Location != "https://up/acct/1" || !slices.Equal(got.Contact, []string{"mailto:x@example.com"}) || got.KeyPEM != "key A" {
			t.Errorf("registered account read elsewhere: %+v, %v", got, err)
		}
		if err := a.SetRelayAccountRegistration(ctx, "up", "nope", "x", nil, t0); !errors.Is(err, ErrNotFound) {
			t.Errorf("registering an account never created: %v, want ErrNotFound", err)
		}
	})
}

// Two instances preparing or relaying one order: one places its upstream
// order, the other waits for it or, once the claim lapsed unrecorded
// (its owner died), takes it over; a lapsed owner cannot record.
func TestOneInstanceAtATimeMayPlaceTheUpstreamOrderOfALocalOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		a, b := openAt(t, place), openAt(t, place)
		o := makeOrder(t, a, newAccount(t, a, t0).ID, life{at: t0, state: "pending"}).order
		until := t0.Add(time.Minute)

		if _, err := b.GetRelayPlacement(ctx, o.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before any claim: %v; want ErrNotFound", err)
		}
		if p, won, err := a.ClaimRelayPlacement(ctx, o.ID, "A", t0, until); err != nil || !won || p.Owner != "A" || !p.Until.Equal(until) {
			t.Fatalf("the first claim: %+v %v %v; want A's until %v", p, won, err, until)
		}
		if p, won, err := b.ClaimRelayPlacement(ctx, o.ID, "B", t0.Add(59*time.Second), t0.Add(2*time.Minute)); err != nil || won || p.Owner != "A" {
			t.Errorf("a claim while A's is live: %+v %v %v; want A's left alone", p, won, err)
		}
		if p, won, err := b.ClaimRelayPlacement(ctx, o.ID, "B", until, until.Add(time.Minute)); err != nil || !won || p.Owner != "B" {
			t.Fatalf("a claim once A's lapsed: %+v %v %v; want B's", p, won, err)
		}
		if p, err := a.RecordRelayPlacement(ctx, o.ID, "A", "https://ca.example/order/a", until); err != nil || p.Placed() {
			t.Errorf("A recording after losing its claim: %+v %v; want nothing recorded", p, err)
		}
		if p, err := b.RecordRelayPlacement(ctx, o.ID, "B", "https://ca.example/order/b", until); err != nil || p.UpstreamOrderURL != "https://ca.example/order/b" {
			t.Fatalf("B recording under its claim: %+v %v", p, err)
		}
		if p, won, err := a.ClaimRelayPlacement(ctx, o.ID, "C", until.Add(time.Hour), until.Add(2*time.Hour)); err != nil || won || p.UpstreamOrderURL != "https://ca.example/order/b" {
			t.Errorf("a claim once an order is recorded, however late: %+v %v %v; want B's order", p, won, err)
		}
		if err := a.ReleaseRelayPlacement(ctx, o.ID, "B"); err != nil {
			t.Fatal(err)
		}
		if p, err := a.GetRelayPlacement(ctx, o.ID); err != nil || p.UpstreamOrderURL != "https://ca.example/order/b" {
			t.Errorf("after releasing a claim whose order is recorded: %+v %v; want the record kept", p, err)
		}
	})
}

func TestAReleasedClaimOnPlacingAnUpstreamOrderMayBeTakenAtOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := makeOrder(t, db, newAccount(t, db, t0).ID, life{at: t0, state: "pending"}).order
		if _, won, err := db.ClaimRelayPlacement(ctx, o.ID, "A", t0, t0.Add(time.Minute)); err != nil || !won {
			t.Fatalf("A's claim: %v %v", won, err)
		}
		if err := db.ReleaseRelayPlacement(ctx, o.ID, "B"); err != nil {
			t.Fatal(err)
		}
		if _, won, _ := db.ClaimRelayPlacement(ctx, o.ID, "B", t0, t0.Add(time.Minute)); won {
			t.Fatal("B released A's claim")
		}
		if err := db.ReleaseRelayPlacement(ctx, o.ID, "A"); err != nil {
			t.Fatal(err)
		}
		if p, won, err := db.ClaimRelayPlacement(ctx, o.ID, "B", t0, t0.Add(time.Minute)); err != nil || !won || p.Owner != "B" {
			t.Errorf("a claim after A released its own: %+v %v %v; want B's", p, won, err)
		}
	})
}

func TestARelayCoolDownRecordedByOneInstanceIsReadByAnotherAndOnlyLengthens(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		a, b := openAt(t, place), openAt(t, place)
		if got, err := b.RelayCoolDown(ctx, "up", "p"); err != nil || !got.IsZero() {
			t.Fatalf("before any: %v (%v); want the zero time", got, err)
		}
		steps := []struct {
			name     string
			extendTo time.Time
			want     time.Time
		}{
			{"the first", t0.Add(time.Hour), t0.Add(time.Hour)},
			{"a shorter one is not a shortening", t0.Add(time.Minute), t0.Add(time.Hour)},
			{"a longer one lengthens it", t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
		}
		for _, s := range steps {
			if err := a.ExtendRelayCoolDown(ctx, "up", "p", s.extendTo); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			got, err := b.RelayCoolDown(ctx, "up", "p")
			if err != nil || !got.Equal(s.want) {
				t.Errorf("%s: the other instance reads %v (%v); want %v", s.name, got, err, s.want)
			}
		}
		if got, err := b.RelayCoolDown(ctx, "up", "other"); err != nil || !got.IsZero() {
			t.Errorf("another profile's: %v (%v); want the zero time", got, err)
		}
		if _, err := a.PruneLimits(ctx, t0.Add(2*time.Hour), 0); err != nil {
			t.Fatal(err)
		}
		if got, err := b.RelayCoolDown(ctx, "up", "p"); err != nil || !got.IsZero() {
			t.Errorf("once over and pruned: %v (%v); want the zero time", got, err)
		}
	})
}

func TestLiveOrderNamesFindsOnlyAnUnexpiredOrderInProgressOfTheProfileNamingOneOfTheNames(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := newOrderWithAuthzs(t, db, 1) // pending, for a.example.com, in profile p, until t0+1h
		tests := []struct {
			name    string
			profile string
			values  []string
			at      time.Time
			want    bool
		}{
			{"ok/its name", "p", []string{"a.example.com"}, t0, true},
			{"ok/its name among others", "p", []string{"x.example.com", "a.example.com"}, t0, true},
			{"fail/another name", "p", []string{"b.example.com"}, t0, false},
			{"fail/no name", "p", nil, t0, false},
			{"fail/another profile", "q", []string{"a.example.com"}, t0, false},
			{"fail/once it expired", "p", []string{"a.example.com"}, t0.Add(time.Hour), false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := db.LiveOrderNames(ctx, tt.profile, tt.values, tt.at)
				if err != nil || got != tt.want {
					t.Errorf("LiveOrderNames(%s, %v, %v) = %v (%v); want %v", tt.profile, tt.values, tt.at, got, err, tt.want)
				}
			})
		}
		if err := db.FailOrder(ctx, o.ID, nil, "failed", t0); err != nil {
			t.Fatal(err)
		}
		if got, err := db.LiveOrderNames(ctx, "p", []string{"a.example.com"}, t0); err != nil || got {
			t.Errorf("once its order failed: %v (%v); want false", got, err)
		}
	})
}
