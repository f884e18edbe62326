package relay

import (
	"fmt"
	"strings"

	"github.com/mholt/acmez/v3/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// Bounds of what the relay keeps of an upstream's answers.
const (
	// maxUpstreamURL bounds a URL the upstream answers (RFC 8555 §7.1:
	// an account's, order's, authorization's, challenge's, finalize's,
	// certificate's): the relay stores some (the account's and order's
	// Location, the challenge it publishes), logs and quotes others.
	maxUpstreamURL = 2048
	// maxChallengeToken bounds a challenge's token (RFC 8555 §8.1:
	// base64url of at least 128 bits; Let's Encrypt's and Pebble's are
	// 43 characters), which the relay stores and serves.
	maxChallengeToken = 256
	// maxResponseHeader bounds an upstream answer's header.
	maxResponseHeader = 64 << 10
	// maxOrderIdentifiers bounds the identifiers, and so the
	// authorizations, of an upstream order: the most a local order may
	// have, whose upstream order has as many.
	maxOrderIdentifiers = vocab.MaxOrderIdentifiers
)

// urlProblem is the error of an upstream's URL of what ("order") that is
// longer than maxUpstreamURL, quoting only its start; nil for one that
// is not. It is an answer that is not ACME's, retried like one.
func urlProblem(what, u string) error {
	if len(u) <= maxUpstreamURL {
		return nil
	}
	return fmt.Errorf("the upstream's %s URL is %d bytes long, longer than %d: %s", what, len(u), maxUpstreamURL, textcut.Clip(u, 64, "…"))
}

// quotedURL is an upstream's URL for a reason: whole when within
// maxUpstreamURL, else its start and its length.
func quotedURL(u string) string {
	if len(u) <= maxUpstreamURL {
		return u
	}
	return fmt.Sprintf("%s (%d bytes, longer than %d)", textcut.Clip(u, 64, "…"), len(u), maxUpstreamURL)
}

// authorizationsProblem is the error of an upstream order listing more
// authorizations than identifiers (RFC 8555 §7.1.3: one per identifier
// at most), or than an order may have identifiers; nil for one that does
// not. The relay reads each authorization an order lists: it asks for
// none of such an order's. It is an answer that is not ACME's, retried
// like one.
func authorizationsProblem(order acme.Order) error {
	n := len(order.Authorizations)
	switch {
	case n > maxOrderIdentifiers:
		return fmt.Errorf("the upstream's order lists %d authorizations, more than the %d identifiers an order may have", n, maxOrderIdentifiers)
	case n > len(order.Identifiers):
		return fmt.Errorf("the upstream's order lists %d authorizations for %d identifiers", n, len(order.Identifiers))
	}
	return nil
}

// tokenProblem is the error of a challenge token that is not base64url
// (RFC 8555 §8.1: no padding) of at most maxChallengeToken characters;
// nil for one that is. The token is not quoted.
func tokenProblem(token string) error {
	if token == "" || len(token) > maxChallengeToken || strings.TrimLeft(token, base64url) != "" {
		return fmt.Errorf("the upstream's challenge token (%d bytes) is not base64url of at most %d characters", len(token), maxChallengeToken)
	}
	return nil
}

const base64url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// checkedChallenge is ch when its URL is within maxUpstreamURL and, with
// usesToken (a strategy that publishes it: http01, dns01), its token is
// base64url within maxChallengeToken; else an error saying which is not.
func checkedChallenge(ch acme.Challenge, usesToken bool) (acme.Challenge, error) {
	if err := urlProblem("challenge", ch.URL); err != nil {
		return acme.Challenge{}, err
	}
	if usesToken {
		if err := tokenProblem(ch.Token); err != nil {
			return acme.Challenge{}, err
		}
	}
	return ch, nil
}
