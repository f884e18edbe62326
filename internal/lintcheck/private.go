package lintcheck

import (
	"crypto/ed25519"
	"crypto/x509"
	"maps"
	"testing"
)

// PrivateCA are the zlint errors every leaf of a private CA raises, each
// with the reason the rule does not apply to it. They are CA/Browser Forum
// rules for publicly trusted certificates.
var PrivateCA = map[string]string{
	"e_sub_cert_certificate_policies_missing": "a private CA asserts no certificate policy: it follows no CA/Browser Forum policy, so a BR policy OID would be a false claim",
	"e_sub_cert_cert_policy_empty":            "a private CA asserts no certificate policy: it follows no CA/Browser Forum policy, so a BR policy OID would be a false claim",
	"e_sub_cert_aia_missing":                  "a private CA runs no OCSP responder (OCSP is optional since BRs 2.0) and publishes no caIssuers URL: clients get the intermediate in the chain and the root from their trust store",
}

// ReservedIP applies to leaves with IP identifiers: the BRs forbid reserved
// addresses because a public CA cannot validate them.
var ReservedIP = map[string]string{
	"e_ext_san_contains_reserved_ip": "an internal CA issues for private-network and loopback addresses (RFC 1918, RFC 4193), which it validates itself",
	"e_subject_contains_reserved_ip": "an internal CA issues for private-network and loopback addresses (RFC 1918, RFC 4193), which it validates itself",
}

// Ed25519 applies to leaves with an Ed25519 key.
var Ed25519 = map[string]string{
	"e_algorithm_identifier_improper_encoding": "the BRs allow only RSA and ECDSA subject keys; a private CA may issue Ed25519 keys to the internal clients that support them (RFC 8410)",
}

// PrivateLeaf lints a leaf issued by this project's local CA, accepting
// exactly the private-CA exceptions that apply to it.
func PrivateLeaf(t testing.TB, der []byte) {
	t.Helper()
	accept := maps.Clone(PrivateCA)
	if c, err := x509.ParseCertificate(der); err == nil {
		if len(c.IPAddresses) > 0 {
			maps.Copy(accept, ReservedIP)
		}
		if _, ok := c.PublicKey.(ed25519.PublicKey); ok {
			maps.Copy(accept, Ed25519)
		}
	}
	Certificate(t, der, accept)
}
