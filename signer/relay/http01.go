package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// httpPublisher answers upstream http-01 challenges in two places: in the
// store, where the acme_proxy_challenges handler of every instance on the
// database finds it (instances need not share Caddy storage), and the way
// Caddy answers its own, in Caddy storage where certmagic's distributed
// solver keeps it, so that a single instance answers with no handler
// configured.
//
// Every Caddy HTTP server hands a request for
// /.well-known/acme-challenge/<token> to the TLS app before any route
// (caddyhttp.Server.ServeHTTP → caddytls.TLS.HandleHTTPChallenge). The TLS
// app finds the automation policy for the request's Host and asks each of
// its ACME issuers (certmagic.ACMEIssuer.HandleHTTPChallenge), which looks
// for the challenge first in its process's memory, then in storage at
//
//	acme/<issuer key>/challenge_tokens/<identifier>.json
//
// for the issuer key of every issuer of that policy; it serves the key
// authorization when the request's Host and path match the challenge.
// Nothing here touches process memory, so the instance that answers need
// not be the one that relays: any instance sharing the storage does.
//
// Which issuer keys that instance consults depends on its TLS automation
// policy for the name, so the publisher writes under every key issuerKeys
// returns (the glue computes the keys the local TLS app's policy uses)
// and under the upstream directory's own key (what certmagic itself writes
// when Caddy is the ACME client of that CA).
type httpPublisher struct {
	storage    certmagic.Storage
	ownKey     string
	issuerKeys func(identifier string) []string
	// shared, if set, is the store the challenge is published in as well;
	// now and ttl give the row its expiry (a bound for a row that a crash
	// left behind: CleanUp deletes it).
	shared func() (*store.DB, error)
	now    func() time.Time
	ttl    time.Duration
}

// challengeTokenKey is certmagic's storage key for a distributed
// challenge (certmagic's distributedSolver.challengeTokensKey).
func challengeTokenKey(issuerKey, identifier string) string {
	return path.Join("acme", certmagic.StorageKeys.Safe(issuerKey), "challenge_tokens",
		certmagic.StorageKeys.Safe(identifier)+".json")
}

// lockName serializes challenges for one name across every instance on
// the storage: a challenge's file is keyed by the name alone, so two at
// once would overwrite each other.
func (p *httpPublisher) lockName(identifier string) string {
	return "acme_proxy_relay_http01_" + certmagic.StorageKeys.Safe(identifier)
}

func (p *httpPublisher) keys(identifier string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if k == "" || seen[k] {
			return
		}
		seen[k] = true
		out = append(out, challengeTokenKey(k, identifier))
	}
	add(p.ownKey)
	if p.issuerKeys != nil {
		for _, k := range p.issuerKeys(identifier) {
			add(k)
		}
	}
	return out
}

// Present takes the name's lock and publishes the challenge. A Present
// that returns nil must be followed by CleanUp.
func (p *httpPublisher) Present(ctx context.Context, chal acme.Challenge) error {
	id := chal.Identifier.Value
	if err := p.storage.Lock(ctx, p.lockName(id)); err != nil {
		return fmt.Errorf("locking http-01 challenges for %s: %w", id, err)
	}
	body, err := json.Marshal(chal)
	if err == nil && p.shared != nil {
		var db *store.DB
		if db, err = p.shared(); err == nil {
			now := p.now()
			err = db.PutRelayHTTPToken(ctx, store.RelayHTTPToken{Token: chal.Token, Identifier: id,
				KeyAuth: chal.KeyAuthorization, Expires: now.Add(p.ttl)}, now)
		}
	}
	if err == nil {
		for _, k := range p.keys(id) {
			if err = p.storage.Store(ctx, k, body); err != nil {
				err = fmt.Errorf("publishing the http-01 challenge for %s: %w", id, err)
				break
			}
		}
	}
	if err != nil {
		_ = p.CleanUp(context.WithoutCancel(ctx), chal)
		return err
	}
	return nil
}

// CleanUp withdraws the challenge and releases the name's lock, even when
// ctx is cancelled.
func (p *httpPublisher) CleanUp(ctx context.Context, chal acme.Challenge) error {
	ctx = context.WithoutCancel(ctx)
	id := chal.Identifier.Value
	var errs []error
	if p.shared != nil {
		db, err := p.shared()
		if err == nil {
			err = db.DeleteRelayHTTPToken(ctx, chal.Token)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, k := range p.keys(id) {
		if err := p.storage.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := p.storage.Unlock(ctx, p.lockName(id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ChallengePathPrefix is where an upstream asks for an http-01 challenge
// (RFC 8555 §8.3).
const ChallengePathPrefix = "/.well-known/acme-challenge/"

// ServeHTTPChallenge answers r when it asks for an upstream http-01
// challenge that a relay signer of any instance on db published for r's
// host, and reports whether it answered. Anything else — another path, an
// unknown or expired token, a token published for another host — is left
// to the caller. The key authorization is the whole body, as RFC 8555
// §8.3 asks.
func ServeHTTPChallenge(w http.ResponseWriter, r *http.Request, db *store.DB, now time.Time) (bool, error) {
	token, ok := strings.CutPrefix(r.URL.Path, ChallengePathPrefix)
	if !ok || token == "" || strings.Contains(token, "/") || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false, nil
	}
	t, err := db.GetRelayHTTPToken(r.Context(), token, now)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if !strings.EqualFold(host, t.Identifier) {
		return false, nil
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write([]byte(t.KeyAuth))
	}
	return true, nil
}
