package caddyacmeproxy

import (
	"net/http"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// renewEarlyBodyMax bounds renew-early's body, which may list many
// serials and orders.
const renewEarlyBodyMax = 1 << 20

// renewEarly is POST /acme_proxy/renew-early: the body is an
// operator.RenewEarlyRequest; the answer lists the certificates whose
// renewal windows moved to now (RFC 9773).
func (a *AdminAPI) renewEarly(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	var req operator.RenewEarlyRequest
	if err := readJSONBody(r, renewEarlyBodyMax, false, &req,
		`{"serials": […], "orders": […], "identifier": …, "account": …, "issuer": …, "profile": …, "explanation_url": …}`); err != nil {
		return err
	}
	v, err := op.RenewEarly(r.Context(), req, actorOf(r))
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, v)
}
