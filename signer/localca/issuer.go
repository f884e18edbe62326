package localca

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// Issuer is the CA a leaf is signed by: its certificate chain and its key.
type Issuer struct {
	// Chain is the issuing CA's certificate first, then the certificates
	// above it, in order. The self-signed root should be included: it is
	// left out of issued chains but served by CAChain, so that a client can
	// bootstrap its trust from <prefix>/ca.pem. Callers must not modify it.
	Chain []*x509.Certificate
	// Key is the private key of Chain[0].
	Key crypto.Signer
}

// Source returns the current issuer. It is called for every signing rather
// than once at start because Caddy's pki CA renews its intermediate while
// the server runs: a signer that kept the first one would sign with a key
// whose certificate has expired. A Source must be safe for concurrent use.
type Source func(ctx context.Context) (Issuer, error)

// Static returns a Source that always returns chain and key. Like every
// Source, the pair is checked each time it is used, not here.
func Static(chain []*x509.Certificate, key crypto.Signer) Source {
	iss := Issuer{Chain: chain, Key: key}
	return func(context.Context) (Issuer, error) { return iss, nil }
}

// FromPEMFiles reads an issuing CA from PEM files once and returns a Static
// source for it. certFile holds the CA's certificate first, optionally
// followed by the certificates above it; keyFile holds its private key,
// unencrypted, as PKCS #8, SEC 1 (EC) or PKCS #1 (RSA). The files are
// checked now, so that a wrong path or a mismatched pair fails the config
// load rather than the first issuance. Errors name the file at fault and
// never quote key material.
func FromPEMFiles(certFile, keyFile string) (Source, error) {
	chain, err := readCertFile(certFile)
	if err != nil {
		return nil, err
	}
	key, err := readKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	iss := Issuer{Chain: chain, Key: key}
	if err := iss.check(); err != nil {
		return nil, &OptionError{"cert", fmt.Errorf("%q with signer.key %q: %w", certFile, keyFile, err)}
	}
	return Static(chain, key), nil
}

func readCertFile(name string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, &OptionError{"cert", err} // *fs.PathError names the file
	}
	var chain []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, &OptionError{"cert", fmt.Errorf("%q: certificate %d: %w", name, len(chain)+1, err)}
		}
		chain = append(chain, cert)
	}
	if len(chain) == 0 {
		return nil, &OptionError{"cert", fmt.Errorf("%q: no PEM CERTIFICATE block", name)}
	}
	// A chain served out of order fails in clients, far from its cause;
	// catch it here, once.
	for i := 0; i+1 < len(chain); i++ {
		if err := chain[i].CheckSignatureFrom(chain[i+1]); err != nil {
			return nil, &OptionError{"cert", fmt.Errorf("%q: certificate %d is not issued by certificate %d: %w", name, i+1, i+2, err)}
		}
	}
	return chain, nil
}

func readKeyFile(name string) (crypto.Signer, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, &OptionError{"key", err} // *fs.PathError names the file
	}
	// Skip blocks such as "EC PARAMETERS", which openssl writes before
	// the key itself.
	var block *pem.Block
	for b, rest := pem.Decode(data); b != nil; b, rest = pem.Decode(rest) {
		if b.Type == "PRIVATE KEY" || b.Type == "EC PRIVATE KEY" || b.Type == "RSA PRIVATE KEY" || b.Type == "ENCRYPTED PRIVATE KEY" {
			block = b
			break
		}
	}
	if block == nil {
		return nil, &OptionError{"key", fmt.Errorf("%q: no PEM private key block", name)}
	}
	// Parse errors describe the ASN.1 structure, never its bytes, so they
	// are safe to wrap.
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		err = errors.New("encrypted keys are not supported")
	}
	if err != nil {
		return nil, &OptionError{"key", fmt.Errorf("%q: cannot parse the %s block: %w", name, block.Type, err)}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, &OptionError{"key", fmt.Errorf("%q: a %T cannot sign", name, key)}
	}
	return signer, nil
}

// check verifies what signing relies on. It runs on every issuer a Source
// returns, because Caddy's pki CA hands out its chain and its key through
// separate calls, and a renewal between them would pair a key with the
// wrong certificate.
func (iss Issuer) check() error {
	if len(iss.Chain) == 0 || iss.Chain[0] == nil {
		return errors.New("no issuing CA certificate")
	}
	if iss.Key == nil {
		return errors.New("no issuing CA key")
	}
	ca := iss.Chain[0]
	if !ca.BasicConstraintsValid || !ca.IsCA {
		return fmt.Errorf("certificate %q is not a CA (basicConstraints cA is not set)", ca.Subject)
	}
	if ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("certificate %q may not sign certificates (keyUsage lacks keyCertSign)", ca.Subject)
	}
	// The CA signs the CRL of its leaves too (SignCRL): one that may not,
	// or that has no key identifier for the CRL's authority key
	// identifier, would issue leaves whose revocations no CRL could ever
	// list. Without a subject key identifier (which RFC 5280 §4.2.1.2
	// requires of a CA) its leaves would also lack the authority key
	// identifier §4.2.1.1 requires of them.
	if ca.KeyUsage&x509.KeyUsageCRLSign == 0 {
		return fmt.Errorf("certificate %q may not sign CRLs (keyUsage lacks cRLSign); this CA publishes the revocations of its leaves on a CRL it signs", ca.Subject)
	}
	if len(ca.SubjectKeyId) == 0 {
		return fmt.Errorf("certificate %q has no subject key identifier (RFC 5280 §4.2.1.2): its leaves could carry no authority key identifier, nor could its CRL", ca.Subject)
	}
	pub, ok := iss.Key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return fmt.Errorf("the key does not match certificate %q", ca.Subject)
	}
	return nil
}
