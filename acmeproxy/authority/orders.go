package authority

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// OrderLifetime is how long a client has to validate and finalize an order.
const OrderLifetime = 24 * time.Hour

// IdentifierRefusal is why the profile will not take a well-formed
// identifier into an order, as a subproblem for it; nil when it will. It
// is the policy hook of new-order: the challenges the profile offers must
// be able to validate it, the profile's policy must permit it, and the
// signer must be able to issue for it.
func (au *Authority) IdentifierRefusal(id acme.Identifier, wildcard bool) *problem.Problem {
	if len(au.challengeTypes(id.Type, wildcard)) == 0 {
		what := "wildcard names need dns-01"
		if id.Type == acme.IdentifierIP {
			what = "IP addresses need http-01 or tls-alpn-01"
		}
		return problem.RejectedIdentifierF("%s cannot be validated here: %s, which this profile does not offer", id.Value, what).For(id.Type, id.Value)
	}
	if prob := au.cfg.Policy(id); prob != nil {
		return prob
	}
	return au.SignerRefusal(id)
}

// CreateOrder stores a new order of the account for idents (checked by
// IdentifierRefusal; wildcards[i] says whether idents[i] is a wildcard),
// with one authorization per identifier and a challenge of each type that
// can validate it (RFC 8555 §7.4). certProfile is the certificate profile
// ChooseCertificateProfile chose. replaces, from Replaces (nil for
// none), is the certificate the order replaces (RFC 9773 §5): of this
// account, sharing an identifier with the order (else the problem
// Replaces found), and replaced by no other order that is not invalid
// (else alreadyReplaced). lim, from OrderLimits (nil
// for none), is spent in the same write; over a limit the order is
// refused with rateLimited and nothing is stored.
func (au *Authority) CreateOrder(ctx context.Context, accountID string, idents []acme.Identifier, wildcards []bool, notBefore, notAfter time.Time, certProfile string, replaces *Replacement, lim *OrderLimits) (store.Order, error) {
	now := au.clock.Now()
	expires := now.Add(OrderLifetime)
	order := store.Order{Profile: au.cfg.Profile, AccountID: accountID, NotBefore: notBefore, NotAfter: notAfter, Expires: expires,
		CertificateProfile: certProfile}
	if replaces != nil {
		if replaces.err != nil {
			return store.Order{}, replaces.err
		}
		order.Replaces, order.ReplacesCertificateID = replaces.certID, replaces.storedID
	}
	authzs := make([]store.Authz, len(idents))
	for i, id := range idents {
		base := acme.Identifier{Type: id.Type, Value: id.Value}
		if wildcards[i] {
			base.Value = id.Value[2:]
		}
		order.Identifiers = append(order.Identifiers, id)
		authzs[i] = store.Authz{Identifier: base, Wildcard: wildcards[i], Expires: expires}
		for _, typ := range au.challengeTypes(id.Type, wildcards[i]) {
			authzs[i].Challenges = append(authzs[i].Challenges, store.Challenge{Type: typ, Token: newToken()})
		}
	}
	o, err := au.db.CreateOrder(ctx, order, authzs, now, lim.spends()...)
	if errors.Is(err, store.ErrWrongState) {
		// Deactivated since its request was verified (RFC 8555 §7.3.6).
		return store.Order{}, problem.DeactivatedAccountF("account %s is deactivated", accountID)
	}
	if errors.Is(err, store.ErrConflict) && replaces != nil && replaces.storedID != "" {
		return store.Order{}, problem.AlreadyReplacedF("certificate %s is already replaced by another order that is not invalid", replaces.certID)
	}
	if refused := au.limitRefusal(ctx, lim, err); refused != nil {
		return o, refused
	}
	if p, ok := au.signer.(signer.OrderPreparer); ok && err == nil {
		p.PrepareOrder(ctx, o.ID, o.Expires)
	}
	return o, err
}

// OwnOrder reads an order of this profile the account owns.
func (au *Authority) OwnOrder(ctx context.Context, accountID, id string) (store.Order, error) {
	o, err := au.db.GetOrder(ctx, au.cfg.Profile, id)
	return owned(o, o.AccountID, err, accountID, "order", "this order belongs to another account")
}

// owned is a resource read for an account, v with its owner: one not
// found is a NotFound(what) problem, another account's is refused with
// notMine.
func owned[T any](v T, owner string, err error, accountID, what, notMine string) (T, error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return v, problem.NotFound(what)
	case err != nil:
		return v, err
	case owner != accountID:
		return v, problem.UnauthorizedF("%s", notMine)
	}
	return v, nil
}

// OrderStatus is the order's status as of now: a pending or ready order
// past its expiry is invalid even before anything rewrote its row.
func (au *Authority) OrderStatus(o store.Order) acme.Status {
	if (o.Status == acme.StatusPending || o.Status == acme.StatusReady) && !au.clock.Now().Before(o.Expires) {
		return acme.StatusInvalid
	}
	return o.Status
}

// OwnCertificate reads a certificate of this profile issued to the
// account.
func (au *Authority) OwnCertificate(ctx context.Context, accountID, id string) (store.Certificate, error) {
	c, err := au.db.GetCertificate(ctx, au.cfg.Profile, id)
	return owned(c, c.AccountID, err, accountID, "certificate", "this certificate belongs to another account")
}

// challengeTypes are the challenges offered for an identifier: wildcards
// only by dns-01, IP addresses not by dns-01 (RFC 8738 §7).
func (au *Authority) challengeTypes(identType string, wildcard bool) []string {
	var out []string
	for _, t := range au.cfg.Challenges {
		switch {
		case wildcard && t != acme.ChallengeDNS01:
		case identType == acme.IdentifierIP && t == acme.ChallengeDNS01:
		default:
			out = append(out, t)
		}
	}
	return out
}

// newToken returns a challenge token: 128+ bits of entropy, base64url
// (RFC 8555 §8.3).
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
