package acmeproxy

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"sync"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// nonceLifetime bounds how long a nonce may wait between being handed out
// and being used. Clients use a nonce within seconds; an hour leaves room
// for slow ones and keeps the used-nonce ledger small.
const nonceLifetime = time.Hour

// nonces mints and consumes anti-replay nonces (RFC 8555 §6.5).
//
// A nonce is self-authenticating: its expiry, 8 random bytes and a MAC over
// (profile, expiry, random) under a key shared through the database. So
// minting costs no I/O, a nonce minted by any instance sharing the database
// is accepted by every other, a nonce of another profile fails its MAC,
// and an expired one fails its clock check. Single use is enforced by
// recording each consumed nonce in the store until it would have expired
// anyway — one insert per signed request, which is also what makes a
// replay fail across restarts and across instances.
type nonces struct {
	key []byte
	db  *store.DB
	// macs holds keyed HMACs for reuse: keying one costs two SHA-256
	// blocks and its allocations, on every response and signed request.
	macs sync.Pool
}

const (
	nonceRandLen = 8
	nonceMACLen  = 16
	nonceLen     = 8 + nonceRandLen + nonceMACLen
)

func (n *nonces) mac(profile string, body []byte) []byte {
	m, _ := n.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, n.key)
	}
	m.Reset()
	m.Write([]byte(profile))
	m.Write([]byte{0})
	m.Write(body)
	sum := m.Sum(nil)[:nonceMACLen]
	n.macs.Put(m)
	return sum
}

// mint returns a fresh nonce for profile.
func (n *nonces) mint(profile string, now time.Time) string {
	var raw [nonceLen]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(now.Add(nonceLifetime).Unix()))
	_, _ = rand.Read(raw[8 : 8+nonceRandLen])
	copy(raw[8+nonceRandLen:], n.mac(profile, raw[:8+nonceRandLen]))
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// consume checks a nonce and marks it used. A problem is a badNonce for the
// client; any other error is a fault.
func (n *nonces) consume(ctx context.Context, profile, nonce string, now time.Time) error {
	expires, err := n.check(profile, nonce, now)
	if err != nil {
		return err
	}
	fresh, err := n.db.UseNonce(ctx, nonce, expires)
	if err != nil {
		return err
	}
	if !fresh {
		return nonceUsed()
	}
	return nil
}

// consumeAs is consume for a request signed by an account: it returns the
// account as it stands when the nonce is spent (store.UseNonceAs).
func (n *nonces) consumeAs(ctx context.Context, profile, nonce string, now time.Time, accountID string) (store.Account, error) {
	expires, err := n.check(profile, nonce, now)
	if err != nil {
		return store.Account{}, err
	}
	acct, fresh, err := n.db.UseNonceAs(ctx, nonce, expires, profile, accountID)
	if err != nil {
		return store.Account{}, err
	}
	if !fresh {
		return store.Account{}, nonceUsed()
	}
	return acct, nil
}

func nonceUsed() error { return problem.BadNonceF("the nonce has already been used") }

// check verifies a nonce without spending it: ours, for this profile, not
// expired. It returns when the nonce expires.
func (n *nonces) check(profile, nonce string, now time.Time) (time.Time, error) {
	if nonce == "" {
		return time.Time{}, problem.BadNonceF("the JWS protected header has no nonce")
	}
	// Strict: the last character's spare bits must be zero, or four
	// spellings of one nonce would each be "fresh".
	raw, err := base64.RawURLEncoding.Strict().DecodeString(nonce)
	if err != nil || len(raw) != nonceLen {
		return time.Time{}, problem.BadNonceF("the nonce was not issued by this server")
	}
	if !hmac.Equal(raw[8+nonceRandLen:], n.mac(profile, raw[:8+nonceRandLen])) {
		return time.Time{}, problem.BadNonceF("the nonce was not issued by this server for this profile")
	}
	expires := time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	if !now.Before(expires) {
		return time.Time{}, problem.BadNonceF("the nonce has expired")
	}
	return expires, nil
}
