package acmeproxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// handleRevokeCert revokes a certificate (RFC 8555 §7.6): the authority
// decides who may (authority.RevokeCert).
func (s *Server) handleRevokeCert(w http.ResponseWriter, r *http.Request) error {
	req, err := s.verify(r.Context(), r, kidOrJWK)
	if err != nil {
		return err
	}
	requester := authority.Requester{Account: req.account, Thumbprint: req.thumbprint}
	if req.jwk != nil {
		requester.Key = req.jwk.Key
	}
	res, err := s.core.RevokeCert(r.Context(), requester, func(v any) error { return decodePayload(req.payload, v) }, clientOf(r))
	if res.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(res.RetryAfter.Round(time.Second)/time.Second)))
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
