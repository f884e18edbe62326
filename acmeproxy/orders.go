package acmeproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// maxIdentifiers bounds one order whatever the max_identifiers limit says
// (which is at most this, and 100 by default): it bounds the order's row.
const maxIdentifiers = acme.MaxOrderIdentifiers

// An order's write spends or checks a failed_validations bucket per
// identifier beside three of its own (orders_per_account,
// pending_authorizations, duplicate_certificates): the store must take
// that many in one write. This fails to compile when it cannot.
const _ = uint(store.MaxLimitKeys - maxIdentifiers - 3)

// orderJSON is an order object (RFC 8555 §7.1.3).
type orderJSON struct {
	Status         acme.Status       `json:"status"`
	Expires        string            `json:"expires,omitempty"`
	Identifiers    []acme.Identifier `json:"identifiers"`
	NotBefore      string            `json:"notBefore,omitempty"`
	NotAfter       string            `json:"notAfter,omitempty"`
	Profile        string            `json:"profile,omitempty"`  // its certificate profile
	Replaces       string            `json:"replaces,omitempty"` // the certID it replaces (RFC 9773 §5)
	Error          json.RawMessage   `json:"error,omitempty"`
	Authorizations []string          `json:"authorizations"`
	Finalize       string            `json:"finalize"`
	Certificate    string            `json:"certificate,omitempty"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (s *Server) orderJSON(base string, o store.Order) orderJSON {
	out := orderJSON{
		Status:         s.core.OrderStatus(o),
		Expires:        rfc3339(o.Expires),
		NotBefore:      rfc3339(o.NotBefore),
		NotAfter:       rfc3339(o.NotAfter),
		Profile:        o.CertificateProfile,
		Replaces:       o.Replaces,
		Error:          o.Error,
		Authorizations: make([]string, len(o.AuthzIDs)),
		Finalize:       base + "/order/" + o.ID + "/finalize",
	}
	out.Identifiers = o.Identifiers
	for i, id := range o.AuthzIDs {
		out.Authorizations[i] = base + "/authz/" + id
	}
	if o.Status == acme.StatusValid && o.CertificateID != "" {
		out.Certificate = base + "/cert/" + o.CertificateID
	}
	return out
}

// writeOrder answers with an order, telling a polling client when to come
// back while it is processing: when its signer expects to be done.
func (s *Server) writeOrder(ctx context.Context, w http.ResponseWriter, base string, status int, o store.Order) {
	if o.Status == acme.StatusProcessing {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.core.ProcessingRetryAfter(ctx, o)/time.Second)))
	}
	w.Header().Set("Location", base+"/order/"+o.ID)
	s.writeJSON(w, status, s.orderJSON(base, o))
}

// handleNewOrder creates an order with one authorization per identifier
// (RFC 8555 §7.4).
func (s *Server) handleNewOrder(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	var p struct {
		Identifiers []acme.Identifier `json:"identifiers"`
		NotBefore   string            `json:"notBefore"`
		NotAfter    string            `json:"notAfter"`
		Profile     string            `json:"profile"`  // a certificate profile (draft-ietf-acme-profiles)
		Replaces    string            `json:"replaces"` // the certID of the certificate it replaces (RFC 9773 §5)
	}
	if err := decodePayload(req.payload, &p); err != nil {
		return err
	}
	now := s.clock.Now()
	idents, wildcards, err := s.checkIdentifiers(p.Identifiers)
	if err != nil {
		return err
	}
	// Counted as the order will be stored: "A.example" and "a.example",
	// or an address and its IPv4-mapped form, are one identifier and one
	// authorization, in this bound as in the limits below.
	if max := s.core.MaxIdentifiers(*req.account); max > 0 && len(idents) > max {
		return s.core.TooManyIdentifiers(*req.account, len(idents))
	}
	notBefore, notAfter, err := parseValidity(p.NotBefore, p.NotAfter, now)
	if err != nil {
		return err
	}
	certProfile, err := s.core.ChooseCertificateProfile(p.Profile, len(idents))
	if err != nil {
		return err
	}
	if prob := s.core.ValidityRefusal(ctx, notBefore, notAfter, certProfile); prob != nil {
		return prob
	}
	// The limits come last, so that a request refused for what it is
	// spends nothing. A newOrder whose "replaces" names this account's
	// certificate inside its renewal window is exempt from the order and
	// duplicate limits: a fleet renewing when asked is never refused.
	// The replaced certificate is read once, for both.
	replaces := s.core.Replaces(ctx, req.account.ID, p.Replaces, idents)
	lim, err := s.core.OrderLimits(ctx, *req.account, idents, wildcards, replaces.InsideItsWindow(), clientOf(r))
	if err != nil {
		return err
	}
	order, err := s.core.CreateOrder(ctx, req.account.ID, idents, wildcards, notBefore, notAfter, certProfile, replaces, lim)
	if err != nil {
		return err
	}
	s.writeOrder(ctx, w, s.baseURL(r), http.StatusCreated, order)
	return nil
}

// checkIdentifiers normalizes and de-duplicates an order's identifiers and
// asks the authority whether it takes each (authority.IdentifierRefusal);
// every refused identifier gets a subproblem naming it as sent.
func (s *Server) checkIdentifiers(in []acme.Identifier) ([]acme.Identifier, []bool, error) {
	if len(in) == 0 {
		return nil, nil, problem.MalformedF("an order needs at least one identifier")
	}
	// The entries are bounded by the body's size (maxBodyBytes); the
	// order's identifiers, once de-duplicated, by maxIdentifiers below.
	var (
		out       []acme.Identifier
		wildcards []bool
		subs      []*problem.Problem
		seen      = map[acme.Identifier]bool{}
	)
	for _, raw := range in {
		id, wildcard, prob := normalizeIdentifier(raw)
		if prob == nil {
			if prob = s.core.IdentifierRefusal(id, wildcard); prob != nil {
				// Named as the client sent it (as a refusal of its
				// syntax is), so that it finds it among its own.
				prob = prob.For(raw.Type, raw.Value)
			}
		}
		if prob != nil {
			subs = append(subs, prob)
			continue
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
			wildcards = append(wildcards, wildcard)
		}
	}
	if len(subs) > 0 {
		return nil, nil, problem.IdentifiersRefused(subs, "several identifiers were refused; see subproblems")
	}
	if len(out) > maxIdentifiers {
		return nil, nil, problem.RejectedIdentifierF("an order may have at most %d identifiers, not %d", maxIdentifiers, len(out))
	}
	return out, wildcards, nil
}

// parseValidity reads newOrder's optional notBefore/notAfter (RFC 3339).
func parseValidity(nb, na string, now time.Time) (time.Time, time.Time, error) {
	var notBefore, notAfter time.Time
	var err error
	if nb != "" {
		if notBefore, err = time.Parse(time.RFC3339, nb); err != nil {
			return notBefore, notAfter, problem.MalformedF("notBefore %s is not an RFC 3339 date-time", problem.Quote(nb))
		}
	}
	if na != "" {
		if notAfter, err = time.Parse(time.RFC3339, na); err != nil {
			return notBefore, notAfter, problem.MalformedF("notAfter %s is not an RFC 3339 date-time", problem.Quote(na))
		}
		if !notAfter.After(now) {
			return notBefore, notAfter, problem.MalformedF("notAfter is in the past")
		}
	}
	if !notBefore.IsZero() && !notAfter.IsZero() && !notAfter.After(notBefore) {
		return notBefore, notAfter, problem.MalformedF("notAfter must be after notBefore")
	}
	return notBefore, notAfter, nil
}

// handleOrder answers POST-as-GET for an order (RFC 8555 §7.4).
func (s *Server) handleOrder(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := store.WithFirstRead(r.Context(), store.FirstReadOfOrder(id))
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	if !req.postAsGet {
		return problem.MalformedF("an order is read with POST-as-GET (an empty payload)")
	}
	o, err := s.core.OwnOrder(ctx, req.account.ID, id)
	if err != nil {
		return err
	}
	s.writeOrder(ctx, w, s.baseURL(r), http.StatusOK, o)
	return nil
}

// handleCertificate serves an issued chain as PEM (RFC 8555 §7.4.2), with
// a Link rel="alternate" to each other chain its signer offered.
func (s *Server) handleCertificate(w http.ResponseWriter, r *http.Request, id string) error {
	return s.serveCertificate(w, r, id, 0)
}

// handleAlternateCertificate serves alternate chain n (from 1) of a
// certificate: cert/{id}/{n}, as its default chain's Link names it.
func (s *Server) handleAlternateCertificate(w http.ResponseWriter, r *http.Request, id string) error {
	n, err := strconv.Atoi(r.PathValue("alt"))
	if err != nil || n < 1 || strconv.Itoa(n) != r.PathValue("alt") {
		return problem.NotFound("certificate chain")
	}
	return s.serveCertificate(w, r, id, n)
}

// serveCertificate answers a POST-as-GET for chain alt of certificate id:
// 0 the default, n the nth alternate. Every answer links the certificate's
// other chains, so a client may start from any of them.
func (s *Server) serveCertificate(w http.ResponseWriter, r *http.Request, id string, alt int) error {
	ctx := store.WithFirstRead(r.Context(), store.FirstReadOfCertificate(id))
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	if !req.postAsGet {
		return problem.MalformedF("a certificate is read with POST-as-GET (an empty payload)")
	}
	c, err := s.core.OwnCertificate(ctx, req.account.ID, id)
	if err != nil {
		return err
	}
	if alt > len(c.AlternatesPEM) {
		return problem.NotFound("certificate chain")
	}
	base := s.baseURL(r) + "/cert/" + id
	chain := c.ChainPEM
	if alt > 0 {
		chain = c.AlternatesPEM[alt-1]
		w.Header().Add("Link", link(base, "alternate"))
	}
	for n := 1; n <= len(c.AlternatesPEM); n++ {
		if n != alt {
			w.Header().Add("Link", link(base+"/"+strconv.Itoa(n), "alternate"))
		}
	}
	w.Header().Set("Content-Type", "application/pem-certificate-chain")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(chain))
	return nil
}
