package operator

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// RenewEarlyRequest selects the certificates an operator asks a fleet to
// renew early (RFC 9773): a CA rotation (by issuer), a key compromise (by
// serial, order or account), a policy change (by identifier pattern).
// The fields set combine with AND; at least one besides Profile is
// required. It is the body of POST /acme_proxy/renew-early.
type RenewEarlyRequest struct {
	Profile string   `json:"profile,omitempty"`
	Serials []string `json:"serials,omitempty"` // hex, any case, colons allowed
	Orders  []string `json:"orders,omitempty"`
	// Identifier is an identifier of the certificate's order, with "*"
	// for any run of characters ("*.example.com").
	Identifier string `json:"identifier,omitempty"`
	Account    string `json:"account,omitempty"`
	// Issuer is the issuing CA's key id: its subject key identifier in
	// hex, as the CRL routes and `caddy acme-proxy crl show` name it.
	Issuer string `json:"issuer,omitempty"`
	// ExplanationURL is the page telling the clients' operators why
	// (RFC 9773 §4.2 explanationURL): an absolute http(s) URL.
	ExplanationURL string `json:"explanation_url,omitempty"`
}

// RenewEarlyListed bounds the certificates a renew-early answer lists, as
// a page of a list is bounded: a selection by issuer may move a whole
// fleet. The answer counts them all, and each has its renew_early audit
// row, which the audit search lists page by page.
const RenewEarlyListed = store.MaxPage

// RenewEarlyView answers a renew-early request: how many certificates'
// windows moved, at At, and the first RenewEarlyListed of them.
type RenewEarlyView struct {
	At             time.Time            `json:"at"`
	ExplanationURL string               `json:"explanation_url,omitempty"`
	Count          int                  `json:"count"`
	Certificates   []RenewEarlyCertView `json:"certificates"`
}

// RenewEarlyCertView is one certificate asked to renew early.
type RenewEarlyCertView struct {
	Profile  string    `json:"profile"`
	Serial   string    `json:"serial"`
	Order    string    `json:"order"`
	Account  string    `json:"account"`
	NotAfter time.Time `json:"not_after"`
}

var (
	issuerKeyIDRE = regexp.MustCompile(`^(name:)?[0-9a-f]{2,128}$`)
	identPatRE    = regexp.MustCompile(`^[a-z0-9.*:_\[\]-]{1,255}$`)
)

// selection checks req and turns it into the store's selection.
func (req RenewEarlyRequest) selection() (store.RenewEarlySelection, error) {
	sel := store.RenewEarlySelection{Profile: req.Profile, OrderIDs: req.Orders, AccountID: req.Account,
		Identifier: strings.ToLower(req.Identifier), IssuerKeyID: strings.ToLower(strings.ReplaceAll(req.Issuer, ":", ""))}
	for _, s := range req.Serials {
		serial, err := normalSerial(s)
		if err != nil {
			return sel, err
		}
		sel.Serials = append(sel.Serials, serial)
	}
	if sel.IssuerKeyID != "" && !issuerKeyIDRE.MatchString(sel.IssuerKeyID) {
		return sel, fmt.Errorf("%w: issuer %q is not a CA key id (its subject key identifier in hex)", ErrInvalid, Clip(req.Issuer))
	}
	if sel.Identifier != "" && !identPatRE.MatchString(sel.Identifier) {
		return sel, fmt.Errorf("%w: identifier %q is not a name, an address or a pattern of them with *", ErrInvalid, Clip(req.Identifier))
	}
	if sel.Empty() {
		return sel, fmt.Errorf("%w: name the certificates to renew early: serials, orders, an identifier, an account or an issuer", ErrInvalid)
	}
	if len(sel.Serials) > store.MaxRenewEarlyList || len(sel.OrderIDs) > store.MaxRenewEarlyList {
		return sel, fmt.Errorf("%w: at most %d serials and %d orders at once", ErrInvalid, store.MaxRenewEarlyList, store.MaxRenewEarlyList)
	}
	if u := req.ExplanationURL; u != "" {
		if err := signer.CheckExplanationURL(u); err != nil {
			return sel, fmt.Errorf("%w: explanation_url %w", ErrInvalid, err)
		}
	}
	return sel, nil
}

// RenewEarly moves the renewal windows of the selected certificates to
// now: every renewalInfo answer about them from now on, on any instance
// sharing the store, lies in the past and carries the explanation URL.
// The selection is stored with the certificates (not recomputed per
// request), and each certificate's move is an audit row naming actor; a
// selection that matches nothing is one row saying what it asked for.
func (op *Operator) RenewEarly(ctx context.Context, req RenewEarlyRequest, actor authority.Actor) (RenewEarlyView, error) {
	sel, err := req.selection()
	if err != nil {
		return RenewEarlyView{}, err
	}
	now := op.now()
	if sel.IssuerKeyID != "" {
		if err := op.nameIssuers(ctx, now); err != nil {
			return RenewEarlyView{}, err
		}
	}
	detail := "an operator asked for renewal now"
	if req.ExplanationURL != "" {
		detail += "; explanation " + req.ExplanationURL
	}
	ev := store.AuditEvent{At: now, Event: acme.EventRenewEarly,
		Outcome: authority.OutcomeSuccess, ActorKind: actor.Kind, ActorID: actor.ID, Reason: "operator", Detail: detail}
	done, err := op.DB.RenewEarly(ctx, sel, req.ExplanationURL, ev, now, 0, RenewEarlyListed)
	if err != nil {
		if done.Count > 0 {
			return RenewEarlyView{}, fmt.Errorf("renew early stopped after %d certificates, each with its audit row (ask again to move the rest): %w", done.Count, err)
		}
		return RenewEarlyView{}, err
	}
	if done.Count == 0 {
		// The attempt is the operator's act even when it moved nothing
		// (as a prune that deleted nothing is recorded): one row saying
		// what was asked for, so that the trail shows it was tried.
		ev.Profile = sel.Profile
		ev.Detail = detail + "; it matched no certificate (unexpired and not revoked) by " + describeSelection(sel)
		if err := op.DB.InsertAudit(ctx, ev); err != nil {
			return RenewEarlyView{}, fmt.Errorf("renew early: the audit row of a selection that matched nothing: %w", err)
		}
	}
	v := RenewEarlyView{At: now, ExplanationURL: req.ExplanationURL, Count: done.Count, Certificates: []RenewEarlyCertView{}}
	for _, c := range done.First {
		v.Certificates = append(v.Certificates, RenewEarlyCertView{Profile: c.Profile, Serial: c.Serial, Order: c.OrderID,
			Account: c.AccountID, NotAfter: c.NotAfter})
	}
	return v, nil
}

// describeSelection says what sel selects by, for an audit row: each
// criterion it sets (they combine with AND), a list by its first few
// entries.
func describeSelection(sel store.RenewEarlySelection) string {
	var parts []string
	list := func(what string, vs []string) {
		if len(vs) == 0 {
			return
		}
		const shown = 4
		s := what + " " + strings.Join(vs[:min(len(vs), shown)], ", ")
		if len(vs) > shown {
			s += fmt.Sprintf(" (and %d more)", len(vs)-shown)
		}
		parts = append(parts, s)
	}
	list("serial", sel.Serials)
	list("order", sel.OrderIDs)
	for _, c := range []struct{ what, v string }{{"identifier", sel.Identifier}, {"account", sel.AccountID},
		{"issuer", sel.IssuerKeyID}, {"profile", sel.Profile}} {
		if c.v != "" {
			parts = append(parts, c.what+" "+c.v)
		}
	}
	return strings.Join(parts, " and ")
}

// nameIssuers records the issuer key id of the unexpired certificates
// stored before it was recorded, so that a selection by issuer finds
// them too. A chain that does not parse is skipped (it names no issuer
// it could be selected by).
func (op *Operator) nameIssuers(ctx context.Context, now time.Time) error {
	const page = 500
	after := ""
	for {
		us, err := op.DB.CertificatesWithoutIssuer(ctx, after, now, page)
		if err != nil {
			return err
		}
		for _, u := range us {
			after = u.ID
			b, _ := pem.Decode([]byte(u.ChainPEM))
			if b == nil {
				continue
			}
			leaf, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				continue
			}
			if err := op.DB.SetCertificateIssuer(ctx, u.ID, signer.LeafIssuerKeyID(leaf)); err != nil {
				return err
			}
		}
		if len(us) < page {
			return nil
		}
	}
}
