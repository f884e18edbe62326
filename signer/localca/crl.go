package localca

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// CRLIssuer returns the key id of the CA that issues now.
func (s *Signer) CRLIssuer(ctx context.Context) (string, error) {
	k, err := s.current(ctx)
	if err != nil {
		return "", err
	}
	return k.info.KeyID, nil
}

// current returns the CA that issues now, remembered if it can be: a CA
// seen only through CRLs (its leaves signed before its record could be
// written, or by an older version) is kept for when it retires. Failing to
// write the record does not stop its CRL; signing does (Issue).
func (s *Signer) current(ctx context.Context) (keptIssuer, error) {
	iss, err := s.Issuer(ctx)
	if err != nil {
		return keptIssuer{}, err
	}
	if k, err := s.book.remember(ctx, iss); err == nil {
		return k, nil
	}
	return keep(iss), nil
}

// CRLIssuers lists the CA that issues now and every CA recorded for this
// profile whose certificate has not expired.
func (s *Signer) CRLIssuers(ctx context.Context) ([]signer.IssuerInfo, error) {
	var errs []error
	cur, err := s.current(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	now := s.clock.Now()
	kept, err := s.book.list(ctx, now)
	if err != nil {
		errs = append(errs, err)
	}
	var out []signer.IssuerInfo
	if cur.info.KeyID != "" {
		out = append(out, cur.info)
	}
	for _, k := range kept {
		if k.info.KeyID != cur.info.KeyID && now.Before(k.info.NotAfter) {
			out = append(out, k.info)
		}
	}
	return out, errors.Join(errs...)
}

// LookupCRLIssuer describes the CA with key id keyID: the current one, or
// one recorded for this profile, whose key has been read and checked.
func (s *Signer) LookupCRLIssuer(ctx context.Context, keyID string) (signer.IssuerInfo, error) {
	k, err := s.issuerFor(ctx, keyID)
	return k.info, err
}

func (s *Signer) issuerFor(ctx context.Context, keyID string) (keptIssuer, error) {
	cur, err := s.current(ctx)
	if err == nil && cur.info.KeyID == keyID {
		return cur, nil
	}
	k, lerr := s.book.lookup(ctx, keyID, s.clock.Now())
	if lerr != nil && err != nil && errors.Is(lerr, signer.ErrIssuerUnknown) {
		// The CA may be the current one, which cannot be read now.
		return keptIssuer{}, fmt.Errorf("%w: %w", signer.ErrIssuerUnavailable, err)
	}
	return k, lerr
}

// SignCRL signs tmpl with the CA whose key id is issuerKeyID: the current
// one or a retired one this profile signed with, until its certificate
// expires. A CRL is signed by the CA that issued its entries; the CA must
// be allowed to sign CRLs (keyUsage cRLSign) and carry a subject key
// identifier, which the CRL's authority key identifier repeats.
func (s *Signer) SignCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList) ([]byte, error) {
	k, err := s.crlSigner(ctx, issuerKeyID)
	if err != nil {
		return nil, err
	}
	ca := k.iss.Chain[0]
	der, err := createCRL(rand.Reader, tmpl, ca, k.iss.Key)
	if err != nil {
		return nil, fmt.Errorf("localca: signing the CRL of %q: %w", ca.Subject, err)
	}
	return der, nil
}

// SignEncodedCRL signs tmpl listing entries, encoded by
// signer.AppendCRLEntry, with the CA SignCRL would sign it with: the CRL
// SignCRL signs for tmpl with those entries.
func (s *Signer) SignEncodedCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList, entries [][]byte) ([]byte, error) {
	k, err := s.crlSigner(ctx, issuerKeyID)
	if err != nil {
		return nil, err
	}
	ca := k.iss.Chain[0]
	der, err := createEncodedCRL(rand.Reader, tmpl, entries, ca, k.iss.Key)
	if err != nil {
		return nil, fmt.Errorf("localca: signing the CRL of %q: %w", ca.Subject, err)
	}
	return der, nil
}

// crlSigner is the CA with key id issuerKeyID, unless it has expired.
func (s *Signer) crlSigner(ctx context.Context, issuerKeyID string) (keptIssuer, error) {
	k, err := s.issuerFor(ctx, issuerKeyID)
	if err != nil {
		return keptIssuer{}, err
	}
	ca := k.iss.Chain[0]
	if now := s.clock.Now(); !now.Before(ca.NotAfter) {
		return keptIssuer{}, fmt.Errorf("%w: CA %q (key id %s) expired at %v, and so has every leaf it signed",
			signer.ErrIssuerRetired, ca.Subject, issuerKeyID, ca.NotAfter)
	}
	return k, nil
}

// Bind scopes the CAs this signer remembers to its profile. It is called
// once, by the ACME layer, before any signing.
func (s *Signer) Bind(b signer.Binding) error { return s.book.bind(b.Profile) }

var _ signer.Binder = (*Signer)(nil)
