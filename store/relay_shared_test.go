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
