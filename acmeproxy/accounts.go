package acmeproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/mail"
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// accountJSON is an account object (RFC 8555 §7.1.2).
type accountJSON struct {
	Status               acme.Status `json:"status"`
	Contact              []string    `json:"contact,omitempty"`
	TermsOfServiceAgreed bool        `json:"termsOfServiceAgreed,omitempty"`
	Orders               string      `json:"orders"`
}

func (s *Server) accountJSON(base string, a store.Account) accountJSON {
	return accountJSON{Status: a.Status, Contact: a.Contact, TermsOfServiceAgreed: a.TOSAgreed,
		Orders: base + "/account/" + a.ID + "/orders"}
}

// An account's contacts are bounded, as everything a client stores is:
// maxContacts of them, each address at most maxContactAddress bytes
// (RFC 5321 §4.5.3.1.3's path, less its angle brackets).
const (
	maxContacts       = 10
	maxContactAddress = 254
)

// checkContacts accepts mailto: URLs with one address and no header
// fields (RFC 8555 §7.3).
func checkContacts(contacts []string) error {
	if len(contacts) > maxContacts {
		return problem.InvalidContactF("an account may have at most %d contacts, not %d", maxContacts, len(contacts))
	}
	for _, c := range contacts {
		if len(c) > len("mailto:")+maxContactAddress {
			return problem.InvalidContactF("contact %.40q…: an address may be at most %d characters long", c, maxContactAddress)
		}
		// A URL's scheme is case-insensitive (RFC 3986 §3.1): MAILTO: is mailto:.
		scheme, addr, ok := strings.Cut(c, ":")
		if !ok || !strings.EqualFold(scheme, "mailto") {
			return problem.UnsupportedContactF("contact %q: only mailto: is supported", c)
		}
		if addr == "" || strings.ContainsAny(addr, "?,") {
			return problem.InvalidContactF("contact %q must name exactly one address and no header fields", c)
		}
		if a, err := mail.ParseAddress(addr); err != nil || a.Address != addr {
			return problem.InvalidContactF("contact %q is not a valid e-mail address", c)
		}
	}
	return nil
}

// handleNewAccount creates an account or finds the existing one for the
// key (RFC 8555 §7.3, §7.3.1).
func (s *Server) handleNewAccount(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	req, err := s.verify(ctx, r, needJWK)
	if err != nil {
		return err
	}
	var p struct {
		Contact              []string `json:"contact"`
		TermsOfServiceAgreed bool     `json:"termsOfServiceAgreed"`
		OnlyReturnExisting   bool     `json:"onlyReturnExisting"`
		// ExternalAccountBinding is RFC 8555 §7.3.4's inner JWS.
		ExternalAccountBinding json.RawMessage `json:"externalAccountBinding"`
	}
	if err := decodePayload(req.payload, &p); err != nil {
		return err
	}
	base := s.baseURL(r)
	existing, err := s.db.AccountByKey(ctx, s.cfg.Profile, req.thumbprint)
	switch {
	case err == nil:
		if existing.Status != acme.StatusValid {
			return problem.DeactivatedAccountF("the account for this key is %s", existing.Status)
		}
		w.Header().Set("Location", base+"/account/"+existing.ID)
		s.writeJSON(w, http.StatusOK, s.accountJSON(base, existing))
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return err
	case p.OnlyReturnExisting:
		return problem.AccountDoesNotExistF("no account exists for this key")
	}
	// RFC 8555 §7.3: a server naming terms of service in its directory
	// "MUST reject newAccount requests that do not have the
	// termsOfServiceAgreed field set to true".
	if s.cfg.TermsOfService != "" && !p.TermsOfServiceAgreed {
		return problem.MalformedF("a new account must agree to this server's terms of service (%s): send termsOfServiceAgreed: true", s.cfg.TermsOfService)
	}
	if err := checkContacts(p.Contact); err != nil {
		return err
	}
	var kid, label string
	hasEAB := len(p.ExternalAccountBinding) > 0 && string(p.ExternalAccountBinding) != "null"
	switch {
	case s.cfg.EAB == "":
		// No binding rule: a binding sent is ignored (RFC 8555 §7.3.4).
	case hasEAB:
		if kid, label, err = s.verifyBinding(ctx, r, req, p.ExternalAccountBinding); err != nil {
			return err
		}
	case s.cfg.EAB == authority.EABRequired:
		return problem.ExternalAccountRequiredF("this server requires an external account binding for new accounts; ask its operator for a key")
	}
	jwk, err := req.jwk.MarshalJSON()
	if err != nil {
		return err
	}
	acct, created, err := s.core.CreateAccount(ctx, store.Account{
		Thumbprint: req.thumbprint, KeyJWK: jwk, Contact: p.Contact, TOSAgreed: p.TermsOfServiceAgreed,
		EABKID: kid, EABLabel: label,
	}, clientOf(r))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", base+"/account/"+acct.ID)
	s.writeJSON(w, status, s.accountJSON(base, acct))
	return nil
}

// ownAccount checks that the request's account is the one in the URL.
func ownAccount(req *signedRequest, id string) error {
	if req.account.ID != id {
		return problem.UnauthorizedF("the request's account does not own this account")
	}
	return nil
}

// handleAccount reads, updates or deactivates an account (RFC 8555
// §7.3.2, §7.3.6).
func (s *Server) handleAccount(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := r.Context()
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	if err := ownAccount(req, id); err != nil {
		return err
	}
	base := s.baseURL(r)
	acct := *req.account
	if !req.postAsGet {
		var p struct {
			Contact *[]string   `json:"contact"`
			Status  acme.Status `json:"status"`
			// TermsOfServiceAgreed is read only to hold it to its type,
			// a boolean, as newAccount does: its value is ignored.
			TermsOfServiceAgreed bool `json:"termsOfServiceAgreed"`
		}
		if err := decodePayload(req.payload, &p); err != nil {
			return err
		}
		// RFC 8555 §7.3.2: the server MUST ignore updates to the status
		// field other than a deactivation (§7.3.6), as it ignores
		// termsOfServiceAgreed (agreement is given at creation, §7.3.3),
		// orders and fields it does not know.
		if p.Status == acme.StatusDeactivated {
			if acct, err = s.core.DeactivateAccount(ctx, id, clientOf(r)); err != nil {
				return err
			}
		}
		if p.Contact != nil && p.Status != acme.StatusDeactivated {
			if err := checkContacts(*p.Contact); err != nil {
				return err
			}
			if acct, err = s.core.UpdateAccountContact(ctx, id, *p.Contact); err != nil {
				return err
			}
		}
	}
	w.Header().Set("Location", base+"/account/"+id)
	s.writeJSON(w, http.StatusOK, s.accountJSON(base, acct))
	return nil
}

// ordersPageSize is how many order URLs one page of an account's orders
// list holds; more follow through Link rel="next" (RFC 8555 §7.1.2.1).
const ordersPageSize = 100

// handleAccountOrders lists an account's orders, newest first.
func (s *Server) handleAccountOrders(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := r.Context()
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	if err := ownAccount(req, id); err != nil {
		return err
	}
	if !req.postAsGet {
		return problem.MalformedF("the orders list is read by POST-as-GET (RFC 8555 §7.1.2.1): an empty payload")
	}
	after := r.URL.Query().Get("cursor")
	ids, err := s.db.AccountOrderIDs(ctx, id, after, s.clock.Now(), ordersPageSize+1)
	if err != nil {
		return err
	}
	base := s.baseURL(r)
	if len(ids) > ordersPageSize {
		ids = ids[:ordersPageSize]
		w.Header().Add("Link", link(base+"/account/"+id+"/orders?cursor="+ids[len(ids)-1], "next"))
	}
	urls := make([]string, len(ids))
	for i, oid := range ids {
		urls[i] = base + "/order/" + oid
	}
	s.writeJSON(w, http.StatusOK, struct {
		Orders []string `json:"orders"`
	}{urls})
	return nil
}

// handleKeyChange rolls an account over to a new key (RFC 8555 §7.3.5):
// the outer JWS is signed by the account, the inner by the new key, and
// the inner payload names the account and its old key.
func (s *Server) handleKeyChange(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	outer, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	base := s.baseURL(r)
	inner, err := s.verifyJWS(ctx, outer.payload, base, s.requestURL(r), needJWK, false)
	if err != nil {
		if p, ok := problem.As(err); ok {
			p.Detail = "inner JWS: " + p.Detail
		}
		return err
	}
	var p struct {
		Account string          `json:"account"`
		OldKey  json.RawMessage `json:"oldKey"`
	}
	if err := decodePayload(inner.payload, &p); err != nil {
		return err
	}
	acct := outer.account
	if p.Account != base+"/account/"+acct.ID {
		return problem.UnauthorizedF("the inner payload's account does not match the outer JWS's kid")
	}
	old, err := parsePublicJWK(p.OldKey)
	if err != nil {
		return problem.MalformedF("the inner payload's oldKey is not a valid key")
	}
	oldTP, err := thumbprint(old)
	if err != nil || oldTP != outer.thumbprint {
		return problem.UnauthorizedF("oldKey is not the account's current key")
	}
	if inner.thumbprint == outer.thumbprint {
		return problem.MalformedF("the new key is the account's current key")
	}
	updated, holder, err := s.core.ChangeAccountKey(ctx, acct.ID, outer.thumbprint, inner.thumbprint, inner.jwk)
	if holder != "" {
		w.Header().Set("Location", base+"/account/"+holder)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", base+"/account/"+acct.ID)
	s.writeJSON(w, http.StatusOK, s.accountJSON(base, updated))
	return nil
}
