package validate

import (
	"context"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// A tls-alpn-01 detail says what the certificate lacks, never how many
// entries or bytes the client's server sent.
func TestTLSALPN01DetailsDoNotEchoCountsOrSizesOfTheCertificate(t *testing.T) {
	const name = "example.test"
	short, err := asn1.Marshal(make([]byte, 5))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		sans   []string
		ext    func(t *testing.T) pkix.Extension
		detail string // %s: the server's address
	}{
		{"fail/three SANs", []string{name, "a.example.test", "b.example.test"},
			func(t *testing.T) pkix.Extension { return acmeExtension(t, testKeyAuth, true) },
			"the certificate from %s does not have exactly one subjectAltName entry; it must have one, example.test"},
		{"fail/a digest of 5 bytes", []string{name},
			func(*testing.T) pkix.Extension {
				return pkix.Extension{Id: oidACMEIdentifier, Critical: true, Value: short}
			},
			"the acmeIdentifier extension of the certificate from %s does not hold a SHA-256 digest (32 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := alpnServer(t, name, acmeCert(t, tt.sans, nil, nil, tt.ext(t)), nil)
			v := newValidator(t, Config{TLSPort: port, Timeout: 5 * time.Second, Dial: loopbackDial(name)})
			p := wantOutcome(t, v.TLSALPN01(context.Background(), acme.IdentifierDNS, name, testKeyAuth), acme.ErrorIncorrectResponse)
			if want := fmt.Sprintf(tt.detail, fmt.Sprintf("%s:%d", name, port)); p.Detail != want {
				t.Errorf("detail %q, want %q", p.Detail, want)
			}
		})
	}
}
