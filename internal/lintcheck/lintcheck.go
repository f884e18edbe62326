// Package lintcheck runs zlint over certificates and CRLs in tests. Like
// net/http/httptest it exists only for tests: production code must not
// import it.
//
// zlint encodes the CA/Browser Forum Baseline Requirements, RFC 5280 and
// the root programs' rules. This project's CAs are private, so a few of
// those rules do not apply; a test names each lint it accepts together
// with the reason, and every other error or fatal result fails the test
// (and, for a CRL, every warning too).
package lintcheck

import (
	"maps"
	"slices"
	"testing"

	zx509 "github.com/zmap/zcrypto/x509"
	"github.com/zmap/zlint/v3"
	"github.com/zmap/zlint/v3/lint"
)

// Certificate lints the DER certificate der and fails t for every error or
// fatal result whose lint is not in accept. accept maps a lint name to the
// written reason it does not apply; an empty reason, or a name zlint does
// not know, fails t too, so the list cannot rot silently.
func Certificate(t testing.TB, der []byte, accept map[string]string) {
	t.Helper()
	if !checkAccept(t, accept, lint.GlobalRegistry().CertificateLints().Names()) {
		return
	}
	c, err := zx509.ParseCertificate(der)
	if err != nil {
		t.Errorf("lintcheck: parsing certificate: %v", err)
		return
	}
	report(t, "certificate", zlint.LintCertificate(c), accept, lint.Error)
}

// CRL lints the DER CRL der the same way Certificate lints a certificate,
// except that a warning fails t too: zlint's CRL warnings are RFC 5280's
// SHOULDs (a reasonCode of unspecified, a duplicate serial, an extension
// not recommended), none of which a CA of this project has a reason to
// break.
func CRL(t testing.TB, der []byte, accept map[string]string) {
	t.Helper()
	CRLPassed(t, der, accept)
}

// CRLPassed is CRL, and returns the names of the lints that applied to
// der and passed, sorted (the others did not apply, or failed t).
func CRLPassed(t testing.TB, der []byte, accept map[string]string) []string {
	t.Helper()
	if !checkAccept(t, accept, lint.GlobalRegistry().RevocationListLints().Names()) {
		return nil
	}
	crl, err := zx509.ParseRevocationList(der)
	if err != nil {
		t.Errorf("lintcheck: parsing CRL: %v", err)
		return nil
	}
	return report(t, "CRL", zlint.LintRevocationList(crl), accept, lint.Warn)
}

// checkAccept reports whether every accepted lint is one of names (sorted)
// and has a reason.
func checkAccept(t testing.TB, accept map[string]string, names []string) bool {
	t.Helper()
	ok := true
	for _, name := range slices.Sorted(maps.Keys(accept)) {
		if accept[name] == "" {
			t.Errorf("lintcheck: accepted lint %s has no justification", name)
			ok = false
		}
		if _, found := slices.BinarySearch(names, name); !found {
			t.Errorf("lintcheck: accepted lint %s is not a zlint lint of this kind", name)
			ok = false
		}
	}
	return ok
}

// report fails t for each result of rs at least as bad as worst (Warn,
// Error) whose lint is not in accept, and returns the names of the lints
// that passed.
func report(t testing.TB, what string, rs *zlint.ResultSet, accept map[string]string, worst lint.LintStatus) []string {
	t.Helper()
	var passed []string
	for _, name := range slices.Sorted(maps.Keys(rs.Results)) {
		r := rs.Results[name]
		if r.Status == lint.Pass {
			passed = append(passed, name)
		}
		if r.Status < worst {
			continue
		}
		if _, ok := accept[name]; ok {
			continue
		}
		t.Errorf("lintcheck: %s fails %s (%s): %s [%s]", what, name, r.Status, r.Details, r.LintMetadata.Citation)
	}
	return passed
}
