package authority

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// External account binding keys (RFC 8555 §7.3.4): an operator mints one
// for a profile, hands its kid and MAC key to whoever may register, and
// the new account's request carries an inner JWS MACed with it. The MAC
// key is shown once, at minting, and never written to a log, an error or
// an audit row.

// EABMACKeySize is the size of a minted MAC key: 256 bits, as HS256
// wants at least (RFC 7518 §3.2).
const EABMACKeySize = 32

// eabKIDSize is the size of a minted key id's random bytes.
const eabKIDSize = 16

// EABConfig is the profile's binding rule (Config.EAB).
func (au *Authority) EABConfig() string { return au.cfg.EAB }

// MintEABKey mints a key for the profile labelled label, binding any
// number of accounts when reusable, until ttl from now when ttl > 0. The
// returned key carries its MAC key: the only time it is handed out.
func (au *Authority) MintEABKey(ctx context.Context, label string, reusable bool, ttl time.Duration, actor Actor) (store.EABKey, error) {
	if ttl < 0 {
		return store.EABKey{}, fmt.Errorf("an EAB key's lifetime must not be negative")
	}
	now := au.clock.Now()
	mac, err := newEABMACKey()
	if err != nil {
		return store.EABKey{}, fmt.Errorf("minting an EAB key: %w", err)
	}
	k := store.EABKey{KID: newEABKID(), Profile: au.cfg.Profile, Label: label,
		HMACKey: mac, Reusable: reusable, Created: now}
	if ttl > 0 {
		k.Expires = now.Add(ttl)
	}
	// The key and its audit row are one write: a key that binds accounts
	// is never stored without the row saying who minted it.
	ev := au.event(ctx, acme.EventEABKeyCreated, OutcomeSuccess, actor, Client{})
	ev.Reason, ev.Detail = store.Clip(label, store.AuditFieldMax), "kid "+k.KID
	if err := au.db.CreateEABKeyAudited(ctx, k, ev); err != nil {
		return store.EABKey{}, err
	}
	au.log.Info("EAB key minted", zap.String("event", acme.EventEABKeyCreated), zap.String("profile", au.cfg.Profile),
		zap.String("eab_kid", k.KID), zap.String("eab_label", label), zap.Bool("reusable", reusable))
	return k, nil
}

// EABKeys lists a page of the profile's keys (f's profile is the
// profile's), newest first, without their MAC keys.
func (au *Authority) EABKeys(ctx context.Context, f store.EABKeyFilter) ([]store.EABKey, error) {
	f.Profile = au.cfg.Profile
	return au.db.ListEABKeys(ctx, f)
}

// RevokeEABKey revokes a key of the profile: it binds no new account.
func (au *Authority) RevokeEABKey(ctx context.Context, kid string, actor Actor) (store.EABKey, error) {
	// The revocation and its audit row are one write (see MintEABKey).
	ev := au.event(ctx, acme.EventEABKeyRevoked, OutcomeSuccess, actor, Client{})
	k, err := au.db.RevokeEABKeyAudited(ctx, au.cfg.Profile, kid, ev.At, func(k store.EABKey) store.AuditEvent {
		e := ev
		e.Reason, e.Detail = store.Clip(k.Label, store.AuditFieldMax), "kid "+k.KID
		return e
	})
	if err != nil {
		return k, err
	}
	au.log.Info("EAB key revoked", zap.String("event", acme.EventEABKeyRevoked), zap.String("profile", au.cfg.Profile),
		zap.String("eab_kid", k.KID), zap.String("eab_label", k.Label))
	return k, nil
}

// VerifyBinding checks an external account binding's MAC (RFC 8555
// §7.3.4): alg is the inner JWS's (HS256, HS384 or HS512), signingInput
// its protected header and payload as signed, sig its signature. It
// returns the key's label; a kid unknown to the profile, another MAC
// algorithm, one whose hash is longer than the key or a wrong MAC is refused with an audit row naming thumbprint,
// the key registering. The MAC is compared in constant time. Whether the
// key still binds (revoked, expired, used) is decided by CreateAccount,
// atomically with the binding.
func (au *Authority) VerifyBinding(ctx context.Context, thumbprint, kid, alg string, signingInput, sig []byte, cl Client) (string, error) {
	newHash, ok := eabHashes[alg]
	if !ok {
		return "", au.RefuseBinding(ctx, thumbprint, kid, cl,
			problem.MalformedF("the external account binding's alg %s is not HS256, HS384 or HS512", problem.Quote(alg)))
	}
	k, err := au.db.EABKeyForBinding(ctx, au.cfg.Profile, kid)
	if errors.Is(err, store.ErrNotFound) {
		return "", au.RefuseBinding(ctx, thumbprint, kid, cl,
			problem.UnauthorizedF("the external account binding's key id %s is not known to this profile", problem.Quote(kid)))
	}
	if err != nil {
		return "", err
	}
	// RFC 7518 §3.2: "A key of the same size as the hash output ... or
	// larger MUST be used"; a minted key (EABMACKeySize) is HS256's.
	if bits := newHash().Size() * 8; len(k.HMACKey)*8 < bits {
		return "", au.RefuseBinding(ctx, thumbprint, kid, cl,
			problem.MalformedF("the external account binding's alg %s needs a MAC key of at least %d bits (RFC 7518 §3.2); key %s has %d: use HS256",
				alg, bits, kid, len(k.HMACKey)*8))
	}
	mac := hmac.New(newHash, k.HMACKey)
	mac.Write(signingInput)
	if !hmac.Equal(mac.Sum(nil), sig) {
		return "", au.RefuseBinding(ctx, thumbprint, kid, cl,
			problem.UnauthorizedF("the external account binding's MAC does not verify with key %s", kid))
	}
	return k.Label, nil
}

var eabHashes = map[string]func() hash.Hash{"HS256": sha256.New, "HS384": sha512.New384, "HS512": sha512.New}

// BindingAuditInterval spaces the audit rows of refused bindings: anyone
// can send a binding (a throwaway account key and a made-up kid cost
// nothing), so a refusal is audited, and logged, once per client address
// (an IPv6 one by its /64) and key of this profile an interval; a kid
// that names no key of this profile, different in every request as it
// may be, counts as one key. Further refusals change nothing durable but
// the spacing's own bucket, which the rate_limit_sweep removes.
const BindingAuditInterval = 10 * time.Minute

// RefuseBinding records that a newAccount's external account binding was
// refused with p, for the key with thumbprint, naming the binding's kid
// (which may be anything the client sent, so it is clipped), and returns
// p: an audit row and a log line, unless this address's refusals for the
// kid were recorded less than BindingAuditInterval ago. The detail of p
// must not quote a MAC key; none of this package's do.
func (au *Authority) RefuseBinding(ctx context.Context, thumbprint, kid string, cl Client, p *problem.Problem) error {
	if !au.firstBindingRefusal(ctx, kid, cl) {
		return p
	}
	ev := au.event(ctx, acme.EventAccountBindingRefused, OutcomeRefused, Actor{Kind: ActorAccountKey, ID: thumbprint}, cl)
	ev.Reason = store.Clip(kid, store.AuditFieldMax)
	ev.Detail = store.Clip(p.Detail+fmt.Sprintf(" (further refused bindings of this key from this address are not audited for %s)", BindingAuditInterval), store.AuditDetailMax)
	au.audit(ctx, ev)
	au.log.Info("account binding refused", zap.String("event", acme.EventAccountBindingRefused),
		zap.String("profile", au.cfg.Profile), zap.String("eab_kid", store.Clip(kid, store.AuditFieldMax)),
		zap.String("detail", store.Clip(p.Detail, store.AuditDetailMax)))
	return p
}

// firstBindingRefusal spends the audit spacing's bucket of a refused
// binding (BindingAuditInterval) and reports whether the refusal is the
// first of its interval, to be recorded. A store that cannot say is
// answered yes: a refusal is then recorded rather than lost.
func (au *Authority) firstBindingRefusal(ctx context.Context, kid string, cl Client) bool {
	ctx = context.WithoutCancel(ctx)
	subject := []string{refusalSource(cl.IP)}
	if kid != "" {
		if _, err := au.db.EABKeyForBinding(ctx, au.cfg.Profile, kid); err == nil {
			subject = append(subject, kid)
		}
	}
	gate := store.LimitSpend{Key: "audit/" + au.limitKey(acme.EventAccountBindingRefused, subject...),
		Emission: BindingAuditInterval, Burst: 1, Cost: 1}
	_, first, err := au.db.SpendLimits(ctx, []store.LimitSpend{gate}, au.clock.Now())
	if err != nil {
		au.log.Warn("spacing refused binding audit rows", zap.String("event", "binding_audit_spacing_failed"), zap.Error(err))
		return true
	}
	return first
}

// newEABKID mints a key id: random base64url that does not begin with
// "-", since operators and clients type it on command lines (`caddy
// acme-proxy eab revoke <kid>`, certbot's --eab-kid, lego's --eab.kid),
// where a leading dash reads as a flag — one id in 64 did.
func newEABKID() string {
	for {
		if kid := randomB64(eabKIDSize); kid[0] != '-' {
			return kid
		}
	}
}

// newEABMACKey is a MAC key of EABMACKeySize random bytes whose base64url
// form, which the operator hands to the client's command line, does not
// begin with a dash, as newEABKID's: certbot's --eab-hmac-key and lego's
// --eab.hmac would take "-…" for a flag. A first byte of 0xf8–0xfb (one
// in 64) encodes as "-"; drawing again costs the key 0.02 bits.
func newEABMACKey() ([]byte, error) {
	for {
		k := make([]byte, EABMACKeySize)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		if k[0]>>2 != 62 {
			return k, nil
		}
	}
}

func randomB64(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("authority: crypto/rand failed: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
