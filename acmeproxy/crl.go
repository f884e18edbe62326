package acmeproxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// handleCRL serves the CRL of the CA the profile issues from now, DER
// (RFC 5280 §5), cacheable until its nextUpdate. It is where leaves issued
// before leaves named their CA's own CRL point.
func (s *Server) handleCRL(w http.ResponseWriter, r *http.Request) error {
	iss, err := s.core.CurrentIssuer(r.Context())
	if err != nil {
		return err
	}
	return s.serveCRL(w, r, iss)
}

// handleIssuerCRL serves the CRL of one CA the profile has issued from, by
// its key id: <prefix>/crl/<key id>, the distribution point in the leaves
// that CA signed, served until its certificate (and so every leaf it
// signed) expires, also once another CA issues.
func (s *Server) handleIssuerCRL(w http.ResponseWriter, r *http.Request, keyID string) error {
	iss, err := s.core.LookupIssuer(r.Context(), keyID)
	if errors.Is(err, signer.ErrIssuerUnknown) {
		return problem.NotFound("CRL")
	}
	if err != nil {
		return err
	}
	return s.serveCRL(w, r, iss)
}

func (s *Server) serveCRL(w http.ResponseWriter, r *http.Request, iss signer.IssuerInfo) error {
	crl, err := s.core.IssuerCRL(r.Context(), iss)
	if errors.Is(err, authority.ErrNoCRL) {
		w.Header().Set("Retry-After", "5")
		return problem.Unavailable("the CRL is being generated; retry shortly")
	}
	if err != nil {
		return err
	}
	now := s.clock.Now()
	h := w.Header()
	h.Set("Content-Type", "application/pkix-crl")
	// The ETag names the CRL by its issuer and cRLNumber, which only
	// grows: a client that holds it gets 304 Not Modified and no body (a
	// CRL of 100,000 entries is about 5 MB). Last-Modified is its
	// thisUpdate, to the second, for clients that only send
	// If-Modified-Since; If-None-Match, when sent, decides.
	h.Set("ETag", crlETag(crl))
	h.Set("Expires", crl.NextUpdate.UTC().Format(http.TimeFormat))
	maxAge := max(int(crl.NextUpdate.Sub(now)/time.Second), 0)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(maxAge))
	h.Del("Replay-Nonce")
	// ServeContent answers conditional (304) and HEAD requests and sets
	// Last-Modified and Content-Length; the DER is served from memory.
	http.ServeContent(w, r, "", crl.ThisUpdate, bytes.NewReader(crl.DER))
	return nil
}

// crlETag is the strong entity tag of a CRL: its issuer's key id and its
// cRLNumber.
func crlETag(crl store.CRL) string {
	id := crl.IssuerKeyID
	if len(id) > 16 {
		id = id[:16]
	}
	return fmt.Sprintf(`"%s-%d"`, id, crl.Number)
}
