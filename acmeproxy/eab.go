package acmeproxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"

	josejson "github.com/go-jose/go-jose/v4/json"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// eabHeader is the protected header of an external account binding's
// inner JWS (RFC 8555 §7.3.4).
type eabHeader struct {
	Alg   string          `json:"alg"`
	KID   string          `json:"kid"`
	Nonce *string         `json:"nonce"`
	URL   *string         `json:"url"`
	JWK   json.RawMessage `json:"jwk"`
	// Crit lists extensions the MAC's signer requires the verifier to
	// understand (RFC 7515 §4.1.11); this server understands none, so
	// a binding naming any is refused, as the outer JWS is.
	Crit json.RawMessage `json:"crit"`
}

// verifyBinding checks a newAccount's externalAccountBinding exactly as
// RFC 8555 §7.3.4 says: a flattened JWS, MACed (HS256/384/512) with a key
// of this profile named by kid, with no nonce and no crit, whose url is the newAccount
// URL and whose payload is the outer JWS's key. It returns the key's kid
// and label. Refusals are audited, spaced (authority.RefuseBinding).
func (s *Server) verifyBinding(ctx context.Context, r *http.Request, outer *signedRequest, raw json.RawMessage) (kid, label string, err error) {
	cl := clientOf(r)
	refuse := func(p *problem.Problem) (string, string, error) {
		return "", "", s.core.RefuseBinding(ctx, outer.thumbprint, kid, cl, p)
	}
	var fj flattenedJWS
	if err := josejson.Unmarshal(raw, &fj); err != nil {
		return refuse(problem.MalformedF("the external account binding is not a flattened JWS"))
	}
	if fj.Signatures != nil || fj.Header != nil || fj.Protected == "" || fj.Payload == nil || fj.Signature == "" {
		return refuse(problem.MalformedF("the external account binding must be a flattened JWS with a protected header, a payload and one signature"))
	}
	rawHdr, err := base64.RawURLEncoding.DecodeString(fj.Protected)
	var hdr eabHeader
	if err != nil || josejson.Unmarshal(rawHdr, &hdr) != nil {
		return refuse(problem.MalformedF("the external account binding's protected header is not base64url JSON"))
	}
	kid = hdr.KID
	switch {
	case hdr.KID == "":
		return refuse(problem.MalformedF("the external account binding's protected header has no kid"))
	case len(hdr.Crit) > 0:
		return refuse(problem.MalformedF("the external account binding's protected header has a crit parameter, which this server does not support"))
	case hdr.Nonce != nil:
		return refuse(problem.MalformedF("the external account binding must not carry a nonce"))
	case len(hdr.JWK) > 0:
		return refuse(problem.MalformedF("the external account binding must not carry a jwk"))
	case hdr.URL == nil:
		return refuse(problem.MalformedF("the external account binding's protected header has no url"))
	case *hdr.URL != s.requestURL(r):
		return refuse(problem.UnauthorizedF("the external account binding's url %s is not this newAccount URL %q", problem.Quote(*hdr.URL), s.requestURL(r)))
	}
	payload, err := base64.RawURLEncoding.DecodeString(*fj.Payload)
	if err != nil {
		return refuse(problem.MalformedF("the external account binding's payload is not base64url"))
	}
	sig, err := base64.RawURLEncoding.DecodeString(fj.Signature)
	if err != nil {
		return refuse(problem.MalformedF("the external account binding's signature is not base64url"))
	}
	key, err := parsePublicJWK(payload)
	if err != nil {
		return refuse(problem.MalformedF("the external account binding's payload is not the account's public key"))
	}
	if tp, err := thumbprint(key); err != nil || tp != outer.thumbprint {
		return refuse(problem.UnauthorizedF("the external account binding binds another key than the one this request is signed with"))
	}
	label, err = s.core.VerifyBinding(ctx, outer.thumbprint, kid, hdr.Alg, []byte(fj.Protected+"."+*fj.Payload), sig, cl)
	if err != nil {
		return "", "", err
	}
	return kid, label, nil
}
