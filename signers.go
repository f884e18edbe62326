package caddyacmeproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddypki"
	"go.uber.org/zap"

	apcaddyfile "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
)

// LocalCA is acme_proxy.signers.local_ca: it signs with a CA of Caddy's pki
// app (default "local") or with an issuing CA from PEM files.
type LocalCA struct {
	localca.Config
	*localca.Signer `json:"-"`
}

// CaddyModule returns the Caddy module information.
func (*LocalCA) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "acme_proxy.signers.local_ca", New: func() caddy.Module { return new(LocalCA) }}
}

// UnmarshalCaddyfile reads the block of `signer local_ca`:
//
//	signer local_ca {
//		ca       <id>
//		cert     <pem file>
//		key      <pem file>
//		lifetime <duration>
//	}
//
// That ca and cert/key are alternatives, and that cert needs key, is
// Provision's call.
func (l *LocalCA) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := apcaddyfile.StartSigner(d); err != nil {
		return err
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		if err := apcaddyfile.Once(d, seen, "signer."+d.Val()); err != nil {
			return err
		}
		var err error
		switch key := d.Val(); key {
		case "ca":
			l.CA, err = apcaddyfile.OneArg(d, "signer.ca")
		case "cert":
			l.Cert, err = apcaddyfile.OneArg(d, "signer.cert")
		case "key":
			l.Key, err = apcaddyfile.OneArg(d, "signer.key")
		case "lifetime":
			var v caddy.Duration
			v, err = apcaddyfile.DurationArg(d, "signer.lifetime")
			l.Lifetime = localca.Duration(v)
		default:
			err = d.Errf("acme_proxy: signer local_ca: unknown setting %q", key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Provision finds the issuing CA and builds the signer.
func (l *LocalCA) Provision(ctx caddy.Context) error {
	if time.Duration(l.Lifetime) < 0 {
		return fmt.Errorf("signer.lifetime: must be positive, not %s", time.Duration(l.Lifetime))
	}
	var (
		src localca.Source
		err error
	)
	switch {
	case l.CA != "" && (l.Cert != "" || l.Key != ""):
		return fmt.Errorf("signer.ca: %q and signer.cert/signer.key are alternatives: a CA of Caddy's pki app, or an issuing CA from files, not both", l.CA)
	case l.Cert != "" && l.Key == "":
		return fmt.Errorf("signer.key: required when signer.cert is set")
	case l.Key != "" && l.Cert == "":
		return fmt.Errorf("signer.cert: required when signer.key is set")
	case l.Cert != "":
		if src, err = localca.FromPEMFiles(l.Cert, l.Key); err != nil {
			return localCAError(err)
		}
	default:
		var ca *caddypki.CA
		if src, ca, err = pkiSource(ctx, l.CA); err != nil {
			return err
		}
		// Every leaf ends with the intermediate at the latest (never past
		// its issuer), and Caddy replaces the intermediate in the last
		// fifth of its lifetime: longer leaves could never be issued, only
		// cut to between a fifth and the whole of the intermediate's
		// lifetime, whatever this setting says. Caddy's acme_server refuses
		// them too. An intermediate given to the pki app is not renewed,
		// and its own end is its bound.
		if life := time.Duration(ca.IntermediateLifetime); ca.Intermediate == nil && l.leafLifetime() > life {
			return fmt.Errorf("signer.lifetime: %v is longer than the intermediate_lifetime (%v) of Caddy's pki CA %q, with which every leaf ends; "+
				"lower signer.lifetime, or raise the CA's intermediate_lifetime", l.leafLifetime(), life, ca.ID)
		}
	}
	// Every CA the signer signs with is kept in Caddy storage, beside the
	// pki app's own CA keys, to sign its CRL after it is renewed or
	// replaced (localca.Storage says why there).
	l.Signer, err = localca.New(src, localca.Options{Lifetime: time.Duration(l.Lifetime), Storage: ctx.Storage()})
	if err != nil {
		return localCAError(err)
	}
	if l.Cert != "" {
		return l.checkFileCA(ctx)
	}
	// Caddy renews its pki CA's intermediate itself, but one it was given
	// (the pki app's intermediate files) that this signer cannot use — no
	// cRLSign, so no CRL for its leaves — fails the load, not every order.
	if _, err := l.Signer.Issuer(ctx); err != nil {
		return fmt.Errorf("signer.ca: %w", err)
	}
	return nil
}

// localCAError names the key of a setting localca refused as the other
// signer errors do (signer.lifetime: …).
func localCAError(err error) error {
	if oe, ok := errors.AsType[*localca.OptionError](err); ok {
		return fmt.Errorf("signer.%s: %w", oe.Option, oe.Err)
	}
	return fmt.Errorf("signer: %w", err)
}

// checkFileCA reads the issuing CA of signer.cert/signer.key once at load:
// a pair that does not match, or a CA that has expired, is a bad config;
// one that expires soon is logged, since nothing renews files (Caddy's pki
// CA renews itself) and from then its leaves are cut short, then refused.
func (l *LocalCA) checkFileCA(ctx caddy.Context) error {
	iss, err := l.Signer.Issuer(ctx)
	if err != nil {
		return fmt.Errorf("signer.cert: %w", err)
	}
	ca, now := iss.Chain[0], time.Now()
	left := ca.NotAfter.Sub(now)
	if left <= 0 {
		return fmt.Errorf("signer.cert: the issuing CA %q expired at %s; no leaf can be signed with it",
			ca.Subject.String(), ca.NotAfter.UTC().Format(time.RFC3339))
	}
	if left < max(caExpiryWarning, 4*l.leafLifetime()) {
		ctx.Logger().Warn("the issuing CA of signer.cert expires soon; replace the cert and key files before: "+
			"leaves are cut short to end with it, and none is issued once it has expired",
			zap.String("event", "issuing_ca_expiring"), zap.String("ca", ca.Subject.String()),
			zap.Time("not_after", ca.NotAfter), zap.Duration("left", left.Truncate(time.Minute)))
	}
	return nil
}

// caExpiryWarning is how long before its end an issuing CA from files is
// logged as expiring at each load (or four leaf lifetimes, if longer).
const caExpiryWarning = 30 * 24 * time.Hour

// shortLived is the longest leaf lifetime that may go without a CRL
// distribution point: seven days, the CA/Browser Forum's short-lived
// certificate (BRs §1.6.1), which needs no revocation pointer.
const shortLived = 7 * 24 * time.Hour

// leafLifetime is the validity of the leaves this signer issues.
func (l *LocalCA) leafLifetime() time.Duration {
	if l.Lifetime == 0 {
		return localca.DefaultLifetime
	}
	return time.Duration(l.Lifetime)
}

// pkiSource reads the issuer from a CA of Caddy's pki app at every
// signing, because Caddy renews that CA's intermediate on its own.
// It returns the CA too, for its settings.
func pkiSource(ctx caddy.Context, id string) (localca.Source, *caddypki.CA, error) {
	if id == "" {
		id = caddypki.DefaultCAID
	}
	appMod, err := ctx.App("pki")
	if err != nil {
		return nil, nil, fmt.Errorf("signer.ca: loading the pki app: %w", err)
	}
	ca, err := appMod.(*caddypki.PKI).GetCA(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("signer.ca: %q: %w", id, err)
	}
	return func(context.Context) (localca.Issuer, error) {
		// Copy: the intermediate chain is Caddy's own slice.
		chain := slices.Concat(ca.IntermediateCertificateChain(), []*x509.Certificate{ca.RootCertificate()})
		return localca.Issuer{Chain: chain, Key: ca.IntermediateKey()}, nil
	}, ca, nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*LocalCA)(nil)
	_ caddyfile.Unmarshaler = (*LocalCA)(nil)
)
