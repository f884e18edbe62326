package acmeproxy

import (
	"encoding/base64"
	"net/http"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// handleFinalize hands the order and its CSR to the authority, which
// checks and signs (RFC 8555 §7.4), and answers with the order.
func (s *Server) handleFinalize(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := store.WithFirstRead(r.Context(), store.FirstReadOfOrder(id))
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	o, err := s.core.Finalize(ctx, *req.account, id, func() ([]byte, error) {
		var p struct {
			CSR string `json:"csr"`
		}
		if err := decodePayload(req.payload, &p); err != nil {
			return nil, err
		}
		der, err := base64.RawURLEncoding.DecodeString(p.CSR)
		if err != nil || len(der) == 0 {
			return nil, problem.MalformedF("csr must be a base64url-encoded DER CSR")
		}
		return der, nil
	}, clientOf(r))
	if err != nil {
		return err
	}
	s.writeOrder(ctx, w, s.baseURL(r), http.StatusOK, o)
	return nil
}
