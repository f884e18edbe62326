package script

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
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
	leaf := certs[0]
	if k, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(csrKey) {
		return nil, &notTheOrders{"the leaf certifies another key than the CSR's"}
	}
	if leaf.IsCA {
		return nil, &notTheOrders{"the leaf is a CA certificate"}
	}
	if err := sameNames(leaf, idents); err != nil {
		return nil, err
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

// sameNames requires the leaf's subject alternative names to be exactly
// the order's identifiers, and its common name, if any, one of them.
func sameNames(leaf *x509.Certificate, idents []acme.Identifier) error {
	if len(leaf.EmailAddresses) > 0 || len(leaf.URIs) > 0 {
		return &notTheOrders{"the leaf names e-mail addresses or URIs, which the order does not"}
	}
	var got, want []string
	for _, n := range leaf.DNSNames {
		got = append(got, "dns:"+strings.ToLower(n))
	}
	for _, ip := range leaf.IPAddresses {
		got = append(got, "ip:"+ip.String())
	}
	// The common name is a name too: a client that reads it takes it
	// for one the leaf certifies. It must be one of the order's, as
	// the CSR's must (an address there is an IP identifier).
	if cn := leaf.Subject.CommonName; cn != "" {
		if ip := net.ParseIP(cn); ip != nil {
			got = append(got, "ip:"+ip.String())
		} else {
			got = append(got, "dns:"+strings.ToLower(cn))
		}
	}
	for _, id := range idents {
		v := strings.ToLower(id.Value)
		if id.Type == acme.IdentifierIP {
			if ip := net.ParseIP(id.Value); ip != nil {
				v = ip.String()
			}
		}
		want = append(want, id.Type+":"+v)
	}
	slices.Sort(got)
	got = slices.Compact(got)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(got, want) {
		return &notTheOrders{fmt.Sprintf("the leaf names %s; the order is for %s", strings.Join(got, ", "), strings.Join(want, ", "))}
	}
	return nil
}
