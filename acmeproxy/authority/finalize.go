package authority

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Finalize finalizes the account's order orderID (RFC 8555 §7.4): it
// finds the order ready, then reads the CSR (DER) with readCSR — the
// request's payload is looked at only for a ready order — checks it
// against the order, re-applies the policy, claims the order (ready →
// processing, so concurrent finalizes sign once) and hands it to the
// signer. It returns the order as it then stands; once claimed, the order
// is finished even if ctx is cancelled.
func (au *Authority) Finalize(ctx context.Context, acct store.Account, orderID string, readCSR func() ([]byte, error), cl Client) (store.Order, error) {
	o, err := au.OwnOrder(ctx, acct.ID, orderID)
	if err != nil {
		return o, err
	}
	if st := au.OrderStatus(o); st != acme.StatusReady {
		return o, problem.OrderNotReadyF("the order is %s, not ready", st)
	}
	der, err := readCSR()
	if err != nil {
		return o, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return o, problem.BadCSRF("the CSR %s", problem.DERFault(err))
	}
	idents := o.Identifiers
	cp, prob := au.orderCertificateProfile(o.CertificateProfile)
	if prob != nil {
		return o, prob
	}
	if err := CheckCSR(csr, idents, acct.KeyJWK); err != nil {
		return o, err
	}
	if err := au.refuseCompromisedKey(ctx, csr); err != nil {
		return o, err
	}
	if err := cp.checkKeyType(csr.PublicKey); err != nil {
		return o, err
	}
	if prob := au.policyRefusal(idents); prob != nil {
		return o, prob
	}
	if err := au.caaRecheck(ctx, o, cl); err != nil {
		return o, err
	}

	claimed := au.clock.Now()
	won, err := au.db.ClaimOrderForIssue(ctx, o.ID, der, store.OrderClient{Addr: cl.IP, UserAgent: cl.UserAgent}, au.claimer(), claimed)
	if err != nil {
		return o, err
	}
	if !won {
		return au.lostClaim(ctx, acct.ID, o)
	}
	// As the claim wrote it, for an answer built from o (a fault leaves
	// it processing: its Retry-After counts from the claim).
	o.UpdatedAt = claimed
	// From here the order is ours; finish it even if the client goes away
	// or the request's deadline passes — within a deadline of its own, so
	// that a database that stops answering now leaves the order processing
	// for the resume sweep rather than the request hanging.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultRequestDeadline)
	defer cancel()
	return au.issue(ctx, o, signer.IssueRequest{
		OrderID: o.ID, Profile: au.cfg.Profile, CSR: csr, CSRDER: der,
		Identifiers: idents, NotBefore: o.NotBefore, NotAfter: o.NotAfter,
		ClientAddr: cl.IP, UserAgent: cl.UserAgent, CRLURL: au.crlURL(),
		CertificateProfile: cp.signerProfile(), Replaces: o.Replaces,
	}, false)
}

// lostClaim answers a finalize whose claim took nothing: the order,
// read again, changed since it was found ready. Another finalize claimed
// it, it expired, or its account was deactivated (which invalidates its
// orders) — each is said as it is, the last as any request of a
// deactivated account is.
func (au *Authority) lostClaim(ctx context.Context, accountID string, o store.Order) (store.Order, error) {
	cur, err := au.OwnOrder(ctx, accountID, o.ID)
	if err != nil {
		return o, err
	}
	switch st := au.OrderStatus(cur); st {
	case acme.StatusProcessing, acme.StatusValid:
		return cur, problem.OrderNotReadyF("the order is already being finalized")
	default:
		if a, err := au.db.GetAccount(ctx, au.cfg.Profile, accountID); err == nil && a.Status == acme.StatusDeactivated {
			return cur, problem.DeactivatedAccountF("account %s is deactivated", accountID)
		}
		return cur, problem.OrderNotReadyF("the order is %s, not ready", st)
	}
}

// issue calls the signer for a claimed order and records what happened,
// returning the order as it now stands.
//
// Only a verdict about the request (a bad CSR, a refused identifier)
// fails the order. A fault on our side — the signer unavailable, the
// issuing CA's chain and key momentarily apart during a renewal, a
// database error — leaves it processing: the client is told to look
// again, and the resume sweep hands it to the signer once more. For a
// finalize (not resumed) the answer is then the processing order; for
// the sweep, the fault is returned so that it is logged.
func (au *Authority) issue(ctx context.Context, o store.Order, req signer.IssueRequest, resumed bool) (store.Order, error) {
	sctx, cancel := context.WithTimeout(ctx, signTimeout)
	out, err := au.signer.Issue(sctx, req)
	cancel()
	if err != nil && !isVerdict(err) {
		if resumed {
			return o, err
		}
		au.log.Warn("certificate issuance deferred: the signer failed on our side; the order stays processing and is retried",
			zap.String("event", "certificate_issue_deferred"), zap.String("profile", au.cfg.Profile),
			zap.String("order", o.ID), zap.Error(err))
		au.metrics.IssueDeferred(au.cfg.Profile, failureClass(err))
		o.Status = acme.StatusProcessing
		return o, nil
	}
	if err != nil {
		prob := signerProblem(err)
		if au.failOrder(ctx, o, prob, err.Error(), Client{IP: req.ClientAddr, UserAgent: req.UserAgent}) {
			au.metrics.IssueFailed(au.cfg.Profile, failureClass(err))
		}
		return o, prob
	}
	if out.Pending {
		return au.db.GetOrder(ctx, au.cfg.Profile, o.ID)
	}
	c, err := au.recordIssued(ctx, o, out.Chain, out.Alternates, Client{IP: req.ClientAddr, UserAgent: req.UserAgent})
	if errors.Is(err, errLeafCRLUnpublished) && !resumed {
		au.log.Warn("certificate issuance deferred: the first CRL of the leaf's CA could not be published; the order stays processing and is retried",
			zap.String("event", "certificate_issue_deferred"), zap.String("profile", au.cfg.Profile),
			zap.String("order", o.ID), zap.Error(err))
		au.metrics.IssueDeferred(au.cfg.Profile, "crl_unpublished")
		o.Status = acme.StatusProcessing
		return o, nil
	}
	if err != nil {
		return o, err
	}
	// What IssueOrder made of the order, without reading it back.
	o.Status, o.CertificateID, o.Error = acme.StatusValid, c.ID, nil
	return o, nil
}

// isVerdict reports whether a signer's error is a verdict about the
// request, which fails the order, rather than a fault on our side.
func isVerdict(err error) bool {
	e, ok := signer.AsError(err)
	return ok && refusalProblem(e, false) != nil
}

// failOrder makes a processing order invalid with prob (what the client
// sees) and detail (what the operator sees), audited and logged, and
// reports whether it did. The order and its audit row are one write:
// should it fail, the order stays processing (the resume sweep finishes
// it, and logs and counts the failure then) and nothing is audited.
func (au *Authority) failOrder(ctx context.Context, o store.Order, prob *problem.Problem, detail string, cl Client) (failed bool) {
	body, _ := json.Marshal(prob)
	ev := au.issueFailedEvent(ctx, o, cl, detail)
	if ferr := au.db.FailOrderAudited(ctx, o.ID, body, detail, ev, au.clock.Now()); errors.Is(ferr, store.ErrWrongState) {
		return false // settled by someone else meanwhile: this failure is not the order's
	} else if ferr != nil {
		au.log.Error("recording a failed issuance", zap.String("event", "order_fail_record_failed"),
			zap.String("order", o.ID), zap.Error(ferr))
		return false
	}
	au.Notified(ev.Jobs)
	au.log.Warn("certificate issuance failed", zap.String("event", acme.EventCertificateIssueFailed),
		zap.String("profile", au.cfg.Profile), zap.String("order", o.ID), zap.String("detail", detail))
	return true
}

// failureClass is a failed or deferred issuance's reason for metrics: a
// small fixed set.
func failureClass(err error) string {
	e, ok := signer.AsError(err)
	if !ok {
		return "internal"
	}
	switch e.Kind {
	case signer.KindBadCSR:
		return "bad_csr"
	case signer.KindRejectedIdentifier:
		return "rejected_identifier"
	case signer.KindBadValidity:
		return "bad_validity"
	case signer.KindRateLimited:
		return "rate_limited"
	case signer.KindCAA:
		return "caa"
	case signer.KindDNS:
		return "dns"
	case signer.KindConnection:
		return "connection"
	case signer.KindCompound:
		return "compound"
	case signer.KindUnavailable:
		return "signer_unavailable"
	}
	return "internal"
}

// policyRefusal re-applies the profile's current identifier policy to an
// order's identifiers (it may have changed since new-order, by a config
// reload): nil, or a problem with a subproblem for each denied one (RFC
// 8555 §6.7.1), as new-order's.
func (au *Authority) policyRefusal(idents []acme.Identifier) *problem.Problem {
	var subs []*problem.Problem
	for _, id := range idents {
		if prob := au.cfg.Policy(id); prob != nil {
			subs = append(subs, prob)
		}
	}
	if len(subs) == 0 {
		return nil
	}
	return problem.IdentifiersRefused(subs, "several identifiers were refused; see subproblems")
}

// ValidityRefusal asks the signer, when it builds the leaf's validity
// itself, whether it will issue the window a newOrder asks for (RFC 8555
// §7.4), under the certificate profile ChooseCertificateProfile chose;
// nil when it will, or when the signer leaves the dates to its backend.
func (au *Authority) ValidityRefusal(ctx context.Context, notBefore, notAfter time.Time, certProfile string) *problem.Problem {
	c, ok := au.signer.(signer.ValidityChecker)
	if !ok || (notBefore.IsZero() && notAfter.IsZero()) {
		return nil
	}
	cp, prob := au.orderCertificateProfile(certProfile)
	if prob != nil {
		return prob
	}
	if err := c.CheckValidity(ctx, notBefore, notAfter, cp.signerProfile()); err != nil {
		return signerProblem(err)
	}
	return nil
}

// SignerRefusal returns a subproblem when the profile's signer cannot
// issue for id at all (signer.IdentifierChecker), so the client learns it
// at newOrder rather than after proving control.
func (au *Authority) SignerRefusal(id acme.Identifier) *problem.Problem {
	c, ok := au.signer.(signer.IdentifierChecker)
	if !ok {
		return nil
	}
	err := c.CheckIdentifier(id)
	if err == nil {
		return nil
	}
	return signerProblem(err).For(id.Type, id.Value)
}

// signerProblem turns a signer's error into what the client sees: its
// refusal, or a generic server fault.
func signerProblem(err error) *problem.Problem {
	e, ok := signer.AsError(err)
	if !ok {
		return problem.Internal()
	}
	if p := refusalProblem(e, false); p != nil {
		return p
	}
	return problem.Unavailable("the signer is unavailable: %s", e.Detail)
}

// refusalProblem is the problem a signer's refusal is for the client:
// its kind's, with its detail; without one, a generic detail when
// generic is set (a refusal reported later, whose reason is the
// operator's), else none. Nil for what is no refusal (KindUnavailable).
// A refusal about some of the order's identifiers carries a subproblem
// for each (RFC 8555 §6.7.1), of its own kind and detail.
func refusalProblem(e *signer.Error, generic bool) *problem.Problem {
	detail := func(otherwise string) string {
		if e.Detail != "" || !generic {
			return e.Detail
		}
		return otherwise + "; the operator can see why"
	}
	p := kindProblem(e.Kind, detail)
	if p == nil {
		return nil
	}
	var subs []*problem.Problem
	for _, sub := range e.Subproblems {
		sp := kindProblem(sub.Kind, func(string) string { return sub.Detail })
		if sp == nil || sub.Kind == signer.KindCompound {
			continue
		}
		subs = append(subs, sp.For(sub.Identifier.Type, sub.Identifier.Value))
	}
	if len(subs) > 0 {
		p = problem.CompoundOf(p, subs)
	}
	return p
}

// kindProblem is the problem of a refusal of kind k, whose detail is
// detail's given the generic one; nil for KindUnavailable and any kind
// unknown.
func kindProblem(k signer.Kind, detail func(generic string) string) *problem.Problem {
	switch k {
	case signer.KindBadCSR:
		return problem.BadCSRF("%s", detail("the signer refused the CSR"))
	case signer.KindRejectedIdentifier:
		return problem.RejectedIdentifierF("%s", detail("the signer refused to issue for this order's identifiers"))
	case signer.KindBadValidity:
		return problem.MalformedF("%s", detail("the signer refused the order's notBefore and notAfter"))
	case signer.KindRateLimited:
		return problem.RateLimitedF(0, "%s", detail("the upstream CA rate-limited this order's identifiers; try again later"))
	case signer.KindCAA:
		return problem.CAARefusalF("%s", detail("the CAA records of this order's identifiers forbid its issuance"))
	case signer.KindDNS:
		return problem.DNSRefusalF("%s", detail("the DNS of this order's identifiers failed their validation"))
	case signer.KindConnection:
		return problem.ConnectionRefusalF("%s", detail("their validation could not connect to this order's identifiers"))
	case signer.KindCompound:
		return problem.CompoundF("%s", detail("the signer refused several of this order's identifiers, each for its own reason (see the subproblems)"))
	}
	return nil
}

// recordIssued stores a signed chain and makes the order valid, with the
// issuance's audit row and its spends (issuanceSpends), in one write.
// Every signer's certificate comes here: finalize's, the resume sweep's,
// a delegated one's and a Settler's.
func (au *Authority) recordIssued(ctx context.Context, o store.Order, chain [][]byte, alternates [][][]byte, cl Client) (store.Certificate, error) {
	if len(chain) == 0 {
		return store.Certificate{}, fmt.Errorf("signer returned an empty chain for order %s", o.ID)
	}
	alternatesPEM, err := alternateChainsPEM(chain[0], alternates)
	if err != nil {
		return store.Certificate{}, fmt.Errorf("order %s: %w", o.ID, err)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return store.Certificate{}, fmt.Errorf("signer returned an unparsable leaf for order %s: %w", o.ID, err)
	}
	// Not recorded (and so not returned) until the CRL it names can be
	// fetched; failing that, the order stays processing, signed again by
	// the resume sweep, as after any fault on our side.
	if err := au.ensureLeafCRL(ctx, leaf); err != nil {
		return store.Certificate{}, fmt.Errorf("order %s: %w", o.ID, err)
	}
	serial := hex.EncodeToString(leaf.SerialNumber.Bytes())
	ev := au.event(ctx, acme.EventCertificateIssued, OutcomeSuccess, Actor{Kind: ActorAccount, ID: o.AccountID}, cl)
	ev.OrderID, ev.AccountID, ev.Identifiers, ev.Serial = o.ID, o.AccountID, o.Identifiers, serial
	ev.Jobs = au.AuditNotifyJobs(ev)
	c, err := au.db.IssueOrder(ctx, store.Certificate{
		OrderID: o.ID, Profile: au.cfg.Profile, AccountID: o.AccountID,
		Serial: serial, ChainPEM: string(PEMChain(chain)),
		PublicKey: leaf.RawSubjectPublicKeyInfo, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
		IssuerKeyID: signer.LeafIssuerKeyID(leaf), AlternatesPEM: alternatesPEM,
	}, ev, ev.At, au.issuanceSpends(ctx, o)...)
	if err != nil {
		return store.Certificate{}, err
	}
	au.Notified(ev.Jobs)
	au.metrics.Issued(au.cfg.Profile)
	au.log.Info("certificate issued", zap.String("event", acme.EventCertificateIssued),
		zap.String("profile", au.cfg.Profile), zap.String("order", o.ID), zap.String("account", o.AccountID),
		zap.String("serial", c.Serial), zap.Time("not_after", c.NotAfter))
	return c, nil
}

// issueFailedEvent is the audit row of o's failed issuance, with its
// notifications, for FailOrderAudited to write with the order's failure.
func (au *Authority) issueFailedEvent(ctx context.Context, o store.Order, cl Client, detail string) store.AuditEvent {
	ev := au.event(ctx, acme.EventCertificateIssueFailed, OutcomeFailure, Actor{Kind: ActorAccount, ID: o.AccountID}, cl)
	ev.OrderID, ev.AccountID, ev.Identifiers, ev.Detail = o.ID, o.AccountID, o.Identifiers, detail
	ev.Jobs = au.AuditNotifyJobs(ev)
	return ev
}

// crlURL is the CRL distribution point leaves of this profile carry: the
// configured crl_url, for a signer that publishes a CRL.
func (au *Authority) crlURL() string {
	if _, ok := au.CRLSigner(); !ok {
		return ""
	}
	return au.cfg.CRLURL
}

// refuseCompromisedKey refuses a CSR for a key that a certificate of this
// store was revoked for keyCompromise with (CA/Browser Forum Baseline
// Requirements §6.1.1.3): a client renewing with the same key — certbot
// --reuse-key, lego --reuse-key or --private-key — after revoking for
// keyCompromise would otherwise get it certified again. The order stays
// ready, for a CSR with another key. The key is looked up as the CSR
// encodes it and as crypto/x509 does, which is how a local CA's leaf
// stores it.
func (au *Authority) refuseCompromisedKey(ctx context.Context, csr *x509.CertificateRequest) error {
	keys := [][]byte{csr.RawSubjectPublicKeyInfo}
	if der, err := x509.MarshalPKIXPublicKey(csr.PublicKey); err == nil && !bytes.Equal(der, csr.RawSubjectPublicKeyInfo) {
		keys = append(keys, der)
	}
	compromised, err := au.db.KeyRevokedForCompromise(ctx, keys...)
	if err != nil {
		return err
	}
	if compromised {
		return problem.BadCSRF("a certificate for the CSR's key was revoked for keyCompromise; that key is not certified again: generate a new one")
	}
	return nil
}

// CheckCSR requires a CSR to be exactly for the order: a valid signature,
// an acceptable key that is not the account key, and a name set equal to
// the order's identifiers (the CN, if any, among them).
//
// The key is checked before the signature: verifying costs the square of
// the modulus's size, and a CSR as large as a request allows carries an
// RSA modulus of 140,000 bits, whose signature took a second of CPU to
// refuse — again on every finalize of one ready order.
func CheckCSR(csr *x509.CertificateRequest, idents []acme.Identifier, accountJWK []byte) error {
	if err := GoodKey(csr.PublicKey); errors.Is(err, ErrKeyType) {
		return problem.BadCSRF("the CSR's key type is not supported")
	} else if err != nil {
		return problem.BadCSRF("%s", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return problem.BadCSRF("the CSR's signature does not verify")
	}
	if k, ok := csr.PublicKey.(ed25519.PublicKey); ok {
		// A low-order point "verifies" forged signatures; go-jose lists
		// the encodings Go's verifier accepts and refuses them.
		if _, err := (&jose.JSONWebKey{Key: k}).Thumbprint(crypto.SHA256); err != nil {
			return problem.BadCSRF("the CSR's Ed25519 key is not a valid public key")
		}
	}
	var acct jose.JSONWebKey
	if err := acct.UnmarshalJSON(accountJWK); err == nil {
		a, errA := x509.MarshalPKIXPublicKey(acct.Key)
		c, errC := x509.MarshalPKIXPublicKey(csr.PublicKey)
		if errA == nil && errC == nil && bytes.Equal(a, c) {
			return problem.BadCSRF("the certificate key must not be the account key")
		}
	}
	if len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return problem.BadCSRF("the CSR may only name DNS names and IP addresses")
	}
	// Names are compared with their types: a dNSName SAN holding an IP
	// address's text is a DNS name, which no order has (RFC 8555 §7.4:
	// the CSR indicates the same set of identifiers, type and value; RFC
	// 5280 §4.2.1.6: an IP address is an iPAddress SAN).
	want := map[csrName]bool{}
	for _, id := range idents {
		want[identName(id)] = true
	}
	got := map[csrName]bool{}
	for _, n := range csr.DNSNames {
		got[csrName{acme.IdentifierDNS, strings.ToLower(n)}] = true
	}
	for _, ip := range csr.IPAddresses {
		got[csrName{acme.IdentifierIP, ip.String()}] = true
	}
	if cn := csr.Subject.CommonName; cn != "" {
		// A common name is either kind of name, as its text says.
		n := csrName{acme.IdentifierDNS, strings.ToLower(cn)}
		if ip := net.ParseIP(cn); ip != nil {
			n = csrName{acme.IdentifierIP, ip.String()}
		}
		if !got[n] && !want[n] {
			return problem.BadCSRF("the CSR's common name %s is not one of the order's identifiers", problem.Quote(cn))
		}
		got[n] = true
	}
	var extra, missing []string
	for n := range got {
		if !want[n] {
			extra = append(extra, n.String())
		}
	}
	for n := range want {
		if !got[n] {
			missing = append(missing, n.String())
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	switch {
	case len(extra) > 0:
		return problem.BadCSRF("the CSR names %s, which the order does not", strings.Join(extra, ", "))
	case len(missing) > 0:
		return problem.BadCSRF("the CSR does not name %s, which the order does", strings.Join(missing, ", "))
	}
	return nil
}

// csrName is a name a CSR carries, with its identifier type.
type csrName struct{ typ, value string }

// identName is an order identifier as the CSR must carry it: a DNS name
// lower-cased, an IP address in Go's canonical text.
func identName(id acme.Identifier) csrName {
	if id.Type == acme.IdentifierIP {
		if ip := net.ParseIP(id.Value); ip != nil {
			return csrName{id.Type, ip.String()}
		}
		return csrName{id.Type, id.Value}
	}
	return csrName{id.Type, strings.ToLower(id.Value)}
}

// String is the name as a problem's detail shows it, with its kind, so
// that an IP address written as a DNS name reads as the different name
// it is.
func (n csrName) String() string {
	if n.typ == acme.IdentifierIP {
		return "IP address " + n.value
	}
	return "DNS name " + problem.Quote(n.value) // as the CSR has it: any IA5 text
}

// alternateChainsPEM renders a signer's alternate chains for storing,
// each of which must be a chain for leaf: a client that prefers another
// chain must get the same certificate.
func alternateChainsPEM(leaf []byte, alternates [][][]byte) ([]string, error) {
	var out []string
	for i, alt := range alternates {
		if len(alt) == 0 || !bytes.Equal(alt[0], leaf) {
			return nil, fmt.Errorf("the signer's alternate chain %d is not a chain for the certificate it issued", i+1)
		}
		out = append(out, string(PEMChain(alt)))
	}
	return out, nil
}

// PEMChain encodes DER certificates as a PEM chain.
func PEMChain(ders [][]byte) []byte {
	var out []byte
	for _, d := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
	}
	return out
}
