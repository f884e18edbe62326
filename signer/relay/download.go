package relay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-jose/go-jose/v4"
	"github.com/mholt/acmez/v3/acme"
)

// The certificate is downloaded here rather than by acmez's
// GetCertificateChain, which reads the upstream's renewal information
// (RFC 9773) with every download: one more upstream request on the
// finalize's path per certificate, whose answer the relay does not use
// (a client's renewalInfo request reads the upstream's window when the
// client asks, see renewal.go).

// Bounds of one download.
const (
	// maxChainBytes bounds a certificate chain's body.
	maxChainBytes = 1 << 20
	// maxAnswerBytes bounds every other answer of the upstream (see
	// boundedAnswers): an order of a hundred names, the largest resource
	// the relay reads, takes some kilobytes.
	maxAnswerBytes = 2 << 20
	// maxProblemBytes bounds an answer that is a problem document
	// (application/problem+json, RFC 8555 §6.7): acmez builds a
	// problem's text by concatenation, one subproblem at a time, and
	// wraps every error with it, so that its cost grows with the square
	// of the document's size — some 20 s of CPU for one of 2 MiB of tiny
	// subproblems, 50 ms at this bound. A refusal naming each of a
	// hundred names of an order with a sentence each takes some 20 KiB.
	maxProblemBytes = 64 << 10
	// maxUpLinks bounds how many issuers a chain is completed with from
	// the answer's Link rel="up" (RFC 8555 §7.4.2), for an upstream that
	// sends the leaf alone.
	maxUpLinks = 4
	// maxBadNonce is how often a download is sent with the fresh nonce
	// of a badNonce answer (RFC 8555 §6.5): as often as acmez sends the
	// relay's other requests, so that an upstream rejecting many nonces
	// (Pebble's PEBBLE_WFE_NONCEREJECT; a CA whose nonces one of its
	// datacenters does not know) fails a download no sooner than them.
	// At three, an upstream rejecting half its nonces failed one attempt
	// in eight at its download, costing the order the job's backoff.
	maxBadNonce = 10
	// stashSize bounds the nonces kept for downloads.
	stashSize = 16
	// maxAlternateTries bounds the alternate chains (Link rel="alternate",
	// RFC 8555 §7.4.2) a download tries, kept or not: each costs signed
	// upstream requests and, when it fails, a log line, and an upstream
	// linking thousands that all fail would otherwise cost thousands of
	// each per attempt. Twice what is kept (store.MaxAlternateChains),
	// so that a few broken ones leave room for the good.
	maxAlternateTries = 8
)

// nonceStash holds upstream nonces for the relay's own requests, apart
// from acmez's pool: a download's answer carries the nonce of the next
// download, so that in the steady state a download needs no nonce
// request. When it is empty, the shared client's transport sets aside the
// nonce of the next upstream answer it sees (contextRecording), which
// costs acmez one nonce request later at most.
type nonceStash struct {
	mu     sync.Mutex
	nonces []string
}

// take returns a nonce, "" when it has none.
func (n *nonceStash) take() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.nonces) == 0 {
		return ""
	}
	v := n.nonces[len(n.nonces)-1]
	n.nonces = n.nonces[:len(n.nonces)-1]
	return v
}

// put keeps v ("" is ignored).
func (n *nonceStash) put(v string) {
	if v == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.nonces) < stashSize {
		n.nonces = append(n.nonces, v)
	}
}

// setAside moves the Replay-Nonce of resp into the stash when the stash
// is empty, so that its client does not use it too. The answer of a
// newNonce request is never taken: acmez hands that nonce to its caller.
func (n *nonceStash) setAside(req *http.Request, resp *http.Response) {
	if n == nil || resp == nil || req.Method == http.MethodHead {
		return
	}
	n.mu.Lock()
	empty := len(n.nonces) == 0
	n.mu.Unlock()
	if v := resp.Header.Get("Replay-Nonce"); empty && v != "" {
		resp.Header.Del("Replay-Nonce")
		n.put(v)
	}
}

// fetchChain downloads the certificate chain at certURL as acct (POST-as-
// GET, RFC 8555 §7.4.2): PEM, leaf first, completed from Link rel="up"
// when the upstream sends the leaf alone. alternates are the URLs of the
// other chains the first answer links with rel="alternate".
func (s *Signer) fetchChain(ctx context.Context, c *acme.Client, acct acme.Account, certURL string) (chain []byte, alternates []string, err error) {
	u := certURL
	for i := range maxUpLinks + 1 {
		resp, body, err := s.postAsGet(ctx, c, acct, u)
		if err != nil {
			return nil, nil, err
		}
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/pem-certificate-chain" {
			return nil, nil, fmt.Errorf("the upstream answered the certificate with Content-Type %q", resp.Header.Get("Content-Type"))
		}
		if i == 0 {
			alternates = relLinks(resp, "alternate")
		}
		chain = append(chain, body...)
		up := relLinks(resp, "up")
		if len(up) == 0 {
			return chain, alternates, nil
		}
		if err := urlProblem("issuer", up[0]); err != nil {
			return nil, nil, err
		}
		u = up[0]
	}
	return nil, nil, fmt.Errorf("the upstream's certificate chain goes on past %d issuers", maxUpLinks)
}

// relLinks are the Link targets of resp whose relation type is rel,
// resolved against the URL it answered.
func relLinks(resp *http.Response, rel string) []string {
	var out []string
	for _, ref := range linkTargets(resp.Header.Values("Link"), rel) {
		u, err := resp.Request.URL.Parse(ref)
		if err == nil {
			out = append(out, u.String())
		}
	}
	return out
}

// linkTargets are the targets, as sent, of the links in Link header
// values whose rel parameter names relation type rel (RFC 8288 §3):
// a link's parameters may come in any order, a title among them may hold
// anything a quoted-string can (a comma, "<", rel="up"), a rel may list
// several types (§3.3), and types compare without regard to case
// (§2.1.1). Only a link's first rel counts. A value is read up to where
// it stops being a list of links.
func linkTargets(values []string, rel string) []string {
	var out []string
	for _, v := range values {
		p := linkParser{s: v}
		for {
			target, rels, ok := p.next()
			if !ok {
				break
			}
			if slices.ContainsFunc(strings.Fields(rels), func(r string) bool { return strings.EqualFold(r, rel) }) {
				out = append(out, target)
			}
		}
	}
	return out
}

// linkParser reads a Link header value (RFC 8288 §3):
//
//	Link       = #link-value
//	link-value = "<" URI-Reference ">" *( OWS ";" OWS link-param )
//	link-param = token BWS [ "=" BWS ( token / quoted-string ) ]
type linkParser struct {
	s string
	i int
}

// next reads the next link-value: its target and its first rel
// parameter's value. ok is false at the end of the value or where it is
// not a link-value.
func (p *linkParser) next() (target, rels string, ok bool) {
	p.skip(", \t") // a list may have empty elements (RFC 9110 §5.6.1)
	if !p.eat('<') {
		return "", "", false
	}
	end := strings.IndexByte(p.s[p.i:], '>')
	if end < 0 {
		return "", "", false
	}
	target = p.s[p.i : p.i+end]
	p.i += end + 1
	seenRel := false
	for {
		p.skip(" \t")
		if !p.eat(';') {
			break
		}
		p.skip(" \t")
		name := p.token()
		if name == "" {
			return "", "", false
		}
		p.skip(" \t")
		value := ""
		if p.eat('=') {
			p.skip(" \t")
			if value, ok = p.value(); !ok {
				return "", "", false
			}
		}
		if strings.EqualFold(name, "rel") && !seenRel {
			rels, seenRel = value, true
		}
	}
	if p.i < len(p.s) && p.s[p.i] != ',' {
		return "", "", false
	}
	return target, rels, true
}

func (p *linkParser) skip(set string) {
	for p.i < len(p.s) && strings.IndexByte(set, p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *linkParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// token reads a token (RFC 9110 §5.6.2).
func (p *linkParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTchar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// value reads a parameter's value: a token or a quoted-string (RFC 9110
// §5.6.4), unquoted.
func (p *linkParser) value() (string, bool) {
	if !p.eat('"') {
		v := p.token()
		return v, v != ""
	}
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return b.String(), true
		case c == '\\' && p.i < len(p.s):
			b.WriteByte(p.s[p.i])
			p.i++
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

func isTchar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// postAsGet reads u as acct, sending it again with the fresh nonce of a
// badNonce answer. An answer of 400 or more is returned as its
// acme.Problem when it is one, else as an error naming its status.
func (s *Signer) postAsGet(ctx context.Context, c *acme.Client, acct acme.Account, u string) (*http.Response, []byte, error) {
	nonce := ""
	for try := 1; ; try++ {
		if nonce == "" {
			nonce = s.nonces.take() // a badNonce answer's nonce may be here (setAside)
		}
		if nonce == "" {
			var err error
			if nonce, err = s.newNonce(ctx, c); err != nil {
				return nil, nil, err
			}
		}
		jws, err := signPostAsGet(acct.PrivateKey, acct.Location, nonce, u)
		if err != nil {
			return nil, nil, permanent("signing a request with the upstream account key: %w", err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(jws))
		if err != nil {
			return nil, nil, permanent("the upstream's certificate URL %q: %w", u, err)
		}
		req.Header.Set("Content-Type", "application/jose+json")
		req.Header.Set("Accept", "application/pem-certificate-chain")
		req.Header.Set("User-Agent", c.UserAgent)
		resp, err := c.HTTPClient.Do(req)
		if err != nil {
			return nil, nil, fmt.Errorf("downloading the certificate: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxChainBytes+1))
		_ = resp.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("downloading the certificate: %w", err)
		}
		nonce = resp.Header.Get("Replay-Nonce")
		if resp.StatusCode < 400 {
			s.nonces.put(nonce)
			if len(body) > maxChainBytes {
				return nil, nil, fmt.Errorf("the upstream's certificate chain is larger than %d bytes", maxChainBytes)
			}
			return resp, body, nil
		}
		var p acme.Problem
		if json.Unmarshal(body, &p) != nil || p.Type == "" {
			return nil, nil, fmt.Errorf("downloading the certificate: the upstream answered %s", resp.Status)
		}
		if p.Status == 0 {
			p.Status = resp.StatusCode
		}
		if p.Type == acme.ProblemTypeBadNonce && try < maxBadNonce {
			continue
		}
		s.nonces.put(nonce)
		return nil, nil, fmt.Errorf("downloading the certificate: %w", p)
	}
}

// newNonce asks the upstream for a nonce (HEAD newNonce).
func (s *Signer) newNonce(ctx context.Context, c *acme.Client) (string, error) {
	dir, err := c.GetDirectory(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the upstream directory: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, dir.NewNonce, nil)
	if err != nil {
		return "", fmt.Errorf("the upstream's newNonce %q: %w", dir.NewNonce, err)
	}
	req.Header.Set("User-Agent", c.UserAgent)
	resp, err := c.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetching an upstream nonce: %w", err)
	}
	_ = resp.Body.Close()
	if v := resp.Header.Get("Replay-Nonce"); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("the upstream's newNonce answered %s without a nonce", resp.Status)
}

// signPostAsGet is the flattened JWS of a POST-as-GET of u (RFC 8555
// §6.3: an empty payload) by the account kid with key.
func signPostAsGet(key crypto.Signer, kid, nonce, u string) ([]byte, error) {
	alg, err := jwsAlgorithm(key)
	if err != nil {
		return nil, err
	}
	opts := (&jose.SignerOptions{}).WithHeader("kid", kid).WithHeader("nonce", nonce).WithHeader("url", u)
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		return nil, err
	}
	obj, err := sg.Sign(nil)
	if err != nil {
		return nil, err
	}
	// The flattened serialization by hand: go-jose's FullSerialize
	// leaves an empty payload out, which RFC 7515 §7.2.2 requires.
	compact, err := obj.CompactSerialize()
	if err != nil {
		return nil, err
	}
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		return nil, errors.New("a compact JWS without three parts")
	}
	return json.Marshal(struct {
		Protected string `json:"protected"`
		Payload   string `json:"payload"`
		Signature string `json:"signature"`
	}{parts[0], parts[1], parts[2]})
}

// jwsAlgorithm is the JWS algorithm of an account key, as acmez signs
// with it.
func jwsAlgorithm(key crypto.Signer) (jose.SignatureAlgorithm, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
	case *rsa.PrivateKey:
		return jose.RS256, nil
	case ed25519.PrivateKey:
		return jose.EdDSA, nil
	}
	return "", errors.New("unsupported account key type")
}
