package authority

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
	"slices"
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// CertificateProfile is a certificate profile the profile offers
// (draft-ietf-acme-profiles): what the signer applies to the leaf, and the
// policy the authority applies to the order.
type CertificateProfile struct {
	signer.CertificateProfile
	// Description is what the directory's meta.profiles shows for it.
	Description string
	// KeyTypes, when set, are the CSR key types it takes (KeyType's
	// names); unset, every key GoodKey accepts.
	KeyTypes []string
	// MaxIdentifiers, when positive, bounds an order's identifiers.
	MaxIdentifiers int
}

// KeyTypes are the key type names a certificate profile may list.
var KeyTypes = []string{"ec256", "ec384", "ed25519", "rsa2048", "rsa3072", "rsa4096", "rsa8192"}

// KeyType names a public key's type as certificate profiles list it:
// "ec256", "ec384", "ed25519", "rsa<bits>"; "" for anything else.
func KeyType(key crypto.PublicKey) string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("rsa%d", k.N.BitLen())
	case *ecdsa.PublicKey:
		return fmt.Sprintf("ec%d", k.Curve.Params().BitSize)
	case ed25519.PublicKey:
		return "ed25519"
	}
	return ""
}

// CertificateProfiles maps the names of the certificate profiles offered
// to their descriptions, for the directory; nil when none is.
func (au *Authority) CertificateProfiles() map[string]string {
	if len(au.cfg.CertificateProfiles) == 0 {
		return nil
	}
	out := make(map[string]string, len(au.cfg.CertificateProfiles))
	for name, cp := range au.cfg.CertificateProfiles {
		out[name] = cp.Description
	}
	return out
}

// ChooseCertificateProfile is the certificate profile of a new order that
// asked for name ("" for none) with n identifiers: the named one, or the
// default; "" when the profile has no default and none was asked for. An
// unknown name is invalidProfile. More identifiers than it allows are
// invalidProfile too when the client named it (a profile "incompatible
// with the rest of the contents of the request", which the profiles
// draft says MUST be), rejectedIdentifier when it is the default (the
// client, which asked for none, can only change its identifiers).
func (au *Authority) ChooseCertificateProfile(name string, n int) (string, error) {
	named := name != ""
	if !named {
		name = au.cfg.DefaultCertificateProfile
		if name == "" {
			return "", nil
		}
	}
	cp, ok := au.cfg.CertificateProfiles[name]
	if !ok {
		return "", au.unknownCertificateProfile(name)
	}
	if cp.MaxIdentifiers > 0 && n > cp.MaxIdentifiers {
		refuse := problem.RejectedIdentifierF
		if named {
			refuse = problem.InvalidProfileF
		}
		return "", refuse("the certificate profile %q allows at most %d identifiers in an order, not %d", name, cp.MaxIdentifiers, n)
	}
	return name, nil
}

func (au *Authority) unknownCertificateProfile(name string) *problem.Problem {
	names := make([]string, 0, len(au.cfg.CertificateProfiles))
	for n := range au.cfg.CertificateProfiles {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return problem.InvalidProfileF("the profile %s is not offered: this server offers no profiles", problem.Quote(name))
	}
	return problem.InvalidProfileF("the profile %s is not offered (offered: %s)", problem.Quote(name), strings.Join(names, ", "))
}

// orderCertificateProfile is what the signer gets for an order whose
// certificate profile is name, checked again (a reload may have removed
// it): nil for none, invalidProfile when it is no longer offered.
func (au *Authority) orderCertificateProfile(name string) (*CertificateProfile, *problem.Problem) {
	if name == "" {
		return nil, nil
	}
	cp, ok := au.cfg.CertificateProfiles[name]
	if !ok {
		return nil, problem.InvalidProfileF("the order's profile %q is no longer offered", name)
	}
	cp.Name = name
	return &cp, nil
}

// signerCertificateProfile is signer.Binding.CertificateProfile: what of
// the certificate profile name, as offered now, the signer applies.
func (au *Authority) signerCertificateProfile(name string) (*signer.CertificateProfile, bool) {
	cp, prob := au.orderCertificateProfile(name)
	if prob != nil || cp == nil {
		return nil, false
	}
	return cp.signerProfile(), true
}

// checkKeyType refuses a CSR key the certificate profile does not take.
func (cp *CertificateProfile) checkKeyType(key crypto.PublicKey) error {
	if cp == nil || len(cp.KeyTypes) == 0 {
		return nil
	}
	if kt := KeyType(key); !slices.Contains(cp.KeyTypes, kt) {
		return problem.BadCSRF("the certificate profile %q takes %s keys, not %s", cp.Name, strings.Join(cp.KeyTypes, ", "), kt)
	}
	return nil
}

// signerProfile is what of cp the signer applies; nil for none.
func (cp *CertificateProfile) signerProfile() *signer.CertificateProfile {
	if cp == nil {
		return nil
	}
	sp := cp.CertificateProfile
	sp.ExtKeyUsage = slices.Clone(sp.ExtKeyUsage)
	return &sp
}
