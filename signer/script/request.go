package script

import (
	"encoding/base64"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// issueRequest is the JSON object the program reads on stdin to issue.
// Its member names are the contract (README, "Script signer").
type issueRequest struct {
	Version     int               `json:"version"`
	Operation   string            `json:"operation"`
	Profile     string            `json:"profile"`
	OrderID     string            `json:"order_id"`
	AccountID   string            `json:"account_id"`
	Identifiers []acme.Identifier `json:"identifiers"`
	// CSR is the DER CSR, base64url without padding (as in ACME).
	CSR       string     `json:"csr"`
	NotBefore *time.Time `json:"not_before"` // RFC 3339; null when the client asked for none
	NotAfter  *time.Time `json:"not_after"`
	// CertificateProfile is the certificate profile the order chose
	// (draft-ietf-acme-profiles' "profile"); null for none. The script
	// applies it as it sees fit: only the local CA applies a profile's
	// lifetime and extended key usages itself.
	CertificateProfile *string `json:"certificate_profile"`
	ClientAddr         string  `json:"client_addr"`
}

// revokeRequest is the JSON object the program reads on stdin to revoke.
type revokeRequest struct {
	Version   int    `json:"version"`
	Operation string `json:"operation"`
	Profile   string `json:"profile"`
	OrderID   string `json:"order_id"`
	// Certificate is the leaf's DER, base64url without padding.
	Certificate string `json:"certificate"`
	// Reason is the RFC 5280 CRLReason code; 0 (unspecified) when the
	// client gave none.
	Reason int `json:"reason"`
}

func issueRequestOf(p issuePayload) issueRequest {
	r := issueRequest{Version: 1, Operation: "issue", Profile: p.Profile, OrderID: p.Order, AccountID: p.AccountID,
		Identifiers: p.Identifiers, CSR: base64.RawURLEncoding.EncodeToString(p.CSR), ClientAddr: p.ClientAddr}
	if r.Identifiers == nil {
		r.Identifiers = []acme.Identifier{}
	}
	if p.CertificateProfile != "" {
		name := p.CertificateProfile
		r.CertificateProfile = &name
	}
	if !p.NotBefore.IsZero() {
		t := p.NotBefore.UTC()
		r.NotBefore = &t
	}
	if !p.NotAfter.IsZero() {
		t := p.NotAfter.UTC()
		r.NotAfter = &t
	}
	return r
}
