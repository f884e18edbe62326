package localca

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// CRLIssuer returns the key id of the CA that issues now.
func (s *Signer) CRLIssuer(ctx context.Context) (string, error) {
	iss, err := s.Issuer(ctx)
	if err != nil {
		return "", err
	}
	return signer.CAKeyID(iss.Chain[0]), nil
}

// SignCRL signs tmpl with the current issuer, which must be the CA named
// by issuerKeyID: a CRL is signed by the CA that issued its entries. The
// issuer must be allowed to sign CRLs (keyUsage cRLSign) and carry a
// subject key identifier, which the CRL's authority key identifier repeats.
func (s *Signer) SignCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList) ([]byte, error) {
	iss, err := s.Issuer(ctx)
	if err != nil {
		return nil, err
	}
	ca := iss.Chain[0]
	if got := signer.CAKeyID(ca); got != issuerKeyID {
		return nil, fmt.Errorf("%w: CA %s is retired, %q (key id %s) issues now", signer.ErrIssuerRetired, issuerKeyID, ca.Subject, got)
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca, iss.Key)
	if err != nil {
		return nil, fmt.Errorf("localca: signing the CRL of %q: %w", ca.Subject, err)
	}
	return der, nil
}
