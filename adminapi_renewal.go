package caddyacmeproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// renewEarly is POST /acme_proxy/renew-early: the body is an
// operator.RenewEarlyRequest; the answer lists the certificates whose
// renewal windows moved to now (RFC 9773).
func (a *AdminAPI) renewEarly(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	var req operator.RenewEarlyRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return apiError(http.StatusBadRequest, fmt.Errorf(`the body must be {"serials": […], "orders": […], "identifier": …, "account": …, "issuer": …, "profile": …, "explanation_url": …}: %w`, err))
	}
	v, err := op.RenewEarly(r.Context(), req, actorOf(r))
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, v)
}
