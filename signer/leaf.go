package signer

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// CheckLeaf says whether leaf, which a backend (an upstream CA, the
// operator's program) issued for an order, is the order's: it certifies
// the CSR's key, is no CA, is valid at some time (its validity does not
// end before it begins), and names exactly the order's identifiers (its
// common name, if any, one of them). The client gets what a signer
// returns as is; a backend that issued for other names or another key —
// a bug, a mix-up of orders, a key reused across orders — must not hand
// a client a certificate it did not ask for. The error says what differs.
func CheckLeaf(leaf *x509.Certificate, csrKey crypto.PublicKey, idents []acme.Identifier) error {
	if k, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(csrKey) {
		return errors.New("the leaf certifies another key than the CSR's")
	}
	if leaf.IsCA {
		return errors.New("the leaf is a CA certificate")
	}
	if leaf.NotAfter.Before(leaf.NotBefore) {
		// RFC 5280 §4.1.2.5 counts both ends in; such a leaf is valid
		// at no time, and a client given it could never use it.
		return fmt.Errorf("the leaf's validity ends before it begins (notBefore %s, notAfter %s)",
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if len(leaf.EmailAddresses) > 0 || len(leaf.URIs) > 0 {
		return errors.New("the leaf names e-mail addresses or URIs, which the order does not")
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
		return fmt.Errorf("the leaf names %s; the order is for %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	return nil
}
