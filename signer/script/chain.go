package script

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// notTheOrders is the error of a chain whose leaf is a certificate, but
// not the one the order asked for: another key, other names, a CA. The
// backend has issued it; running the program again would issue another.
type notTheOrders struct{ why string }

func (e *notTheOrders) Error() string { return e.why }

// parseChain checks what the program printed for an order and returns the
// chain as DER, leaf first. It must be PEM CERTIFICATE blocks and nothing
// else but whitespace; the leaf must certify the CSR's key for exactly the
// order's identifiers, not be a CA (else a *notTheOrders); each
// certificate must be signed by the next. Anything else is the program's
// failure.
func parseChain(out []byte, csrKey crypto.PublicKey, idents []acme.Identifier) ([][]byte, error) {
	var certs []*x509.Certificate
	rest := out
	for {
		// pem.Decode skips any text before a block; only whitespace may
		// stand there.
		if next := bytes.TrimLeft(rest, " \t\r\n"); len(next) > 0 && !bytes.HasPrefix(next, []byte("-----BEGIN ")) {
			return nil, errors.New("output holds something other than PEM certificates")
		}
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("output holds a PEM %q block; want only CERTIFICATE blocks", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the output does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("output holds something other than PEM certificates")
	}
	if len(certs) == 0 {
		return nil, errors.New("output holds no PEM certificate")
	}
	if err := signer.CheckLeaf(certs[0], csrKey, idents); err != nil {
		return nil, &notTheOrders{err.Error()}
	}
	for i := 0; i+1 < len(certs); i++ {
		if err := certs[i].CheckSignatureFrom(certs[i+1]); err != nil {
			return nil, fmt.Errorf("certificate %d of the output is not signed by certificate %d: %w", i+1, i+2, err)
		}
	}
	chain := make([][]byte, len(certs))
	for i, c := range certs {
		chain[i] = c.Raw
	}
	return chain, nil
}

// checkDatesAsked says whether the leaf (DER) carries the notBefore and
// notAfter the order asked for (zero: not asked for), to the second, a
// certificate's precision: RFC 8555 §7.4 has the server issue the dates
// requested or refuse them, and the program was to refuse (exit 2,
// "badValidity:") what it would not sign. A leaf with other dates is a
// *notTheOrders.
func checkDatesAsked(leafDER []byte, notBefore, notAfter time.Time) error {
	if notBefore.IsZero() && notAfter.IsZero() {
		return nil
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return err
	}
	const layout = time.RFC3339
	if !notBefore.IsZero() && !leaf.NotBefore.Equal(notBefore.Truncate(time.Second)) {
		return &notTheOrders{fmt.Sprintf("the leaf is valid from %s; the order asked for %s",
			leaf.NotBefore.UTC().Format(layout), notBefore.UTC().Format(layout))}
	}
	if !notAfter.IsZero() && !leaf.NotAfter.Equal(notAfter.Truncate(time.Second)) {
		return &notTheOrders{fmt.Sprintf("the leaf is valid until %s; the order asked for %s",
			leaf.NotAfter.UTC().Format(layout), notAfter.UTC().Format(layout))}
	}
	return nil
}
