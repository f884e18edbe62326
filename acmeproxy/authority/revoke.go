package authority

import (
	"crypto"
	"github.com/acmeproxy/caddy-acme-proxy/acme"

	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// RevokeKind is the kind of the job that carries a revocation to a
// signer's backend (an upstream CA, a script). It is keyed by order.
const RevokeKind = "signer_revoke"

const (
	// DefaultRevokeWait is how long a request waits for its signer_revoke
	// job before it answers "queued" (Options.RevokeWait).
	DefaultRevokeWait = 10 * time.Second
	// revokeMaxAttempts is a signer_revoke job's attempt budget; its
	// deadline is the certificate's expiry.
	revokeMaxAttempts = 16
)

// Errors of the revocation tail, shared by revoke-cert and the operator.
var (
	// ErrAlreadyRevoked: the certificate is revoked already (perhaps by
	// a concurrent request that won).
	ErrAlreadyRevoked = errors.New("the certificate is already revoked")
	// ErrBadRevocationReason: not a reason the requester may choose
	// (clientReasons, operatorReasons).
	ErrBadRevocationReason = errors.New("the reason is not an RFC 5280 CRLReason code the requester may choose")
	// ErrCertificateExpired: the certificate is past its notAfter, and
	// not revoked: no CRL issued from now on would list it (a CRL keeps
	// an entry only a while past its certificate's expiry,
	// CRLKeepsExpired), and no relying party accepts it anyway.
	ErrCertificateExpired = errors.New("the certificate has expired, and an expired certificate is not revoked")
	// ErrRevocationFailed: the backend's job gave up without revoking.
	ErrRevocationFailed = errors.New("the signer's backend did not revoke the certificate")
	// ErrRevocationCancelled: the backend's job was cancelled (by an
	// operator) before it revoked; the error wraps ErrRevocationFailed too.
	ErrRevocationCancelled = errors.New("its job was cancelled")
	// ErrRevocationRefused: the backend stated it will not revoke the
	// certificate (signer.ErrRevocationRefused); asking again cannot help.
	ErrRevocationRefused = errors.New("the signer's backend refused to revoke the certificate")
	// ErrUnpublishable: the CA that issued the certificate cannot sign a
	// CRL here — the signer has no record of it, or cannot reach its key
	// now (the error then also wraps signer.ErrIssuerUnavailable) — so the
	// revocation would reach no CRL; nothing was recorded.
	ErrUnpublishable = errors.New("no CRL can list the revocation, so it was not recorded")
)

// clientReasons are the reasons a subscriber may give in revoke-cert: the
// ones that describe the subscriber's own certificate. The rest are not
// theirs to state: cACompromise and aACompromise are about authorities,
// certificateHold is temporary (nothing here ever releases it), and
// removeFromCRL (8) belongs on delta CRLs only — written into a complete
// CRL it tells verifiers the certificate is good again, so a client that
// chose it would be "revoked" yet trusted.
var clientReasons = []int{acme.ReasonUnspecified, acme.ReasonKeyCompromise, acme.ReasonAffiliationChanged, acme.ReasonSuperseded,
	acme.ReasonCessationOfOperation}

// operatorReasons are the reasons an operator may give: the client's, and
// privilegeWithdrawn, which only the CA can know (the CA/Browser Forum's
// set for subscriber certificates).
var operatorReasons = append(slices.Clone(clientReasons), acme.ReasonPrivilegeWithdrawn)

// OperatorReasons are the reasons an operator may give, for a form to
// offer.
func OperatorReasons() []int { return slices.Clone(operatorReasons) }

// reasonAllowed reports whether r is absent or one of allowed.
func reasonAllowed(r *int, allowed []int) bool {
	return r == nil || slices.Contains(allowed, *r)
}

// reasonList says allowed for an error detail: "0, 1, 3, 4 or 5".
func reasonList(allowed []int) string {
	parts := make([]string, len(allowed))
	for i, r := range allowed {
		parts[i] = strconv.Itoa(r)
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// crlReason is the reason a complete CRL states for a ledger entry: the
// recorded one, except removeFromCRL, which on a complete CRL would
// un-revoke the certificate; a ledger row holding it (recorded before
// clients were refused it) is listed without a reason.
func crlReason(r *int) int {
	if reasonCode(r) == acme.ReasonRemoveFromCRL {
		return acme.ReasonUnspecified
	}
	return reasonCode(r)
}

// reasonCode is a recorded reason's code: no reason is unspecified (0),
// as on a CRL.
func reasonCode(r *int) int {
	if r == nil {
		return acme.ReasonUnspecified
	}
	return *r
}

// RevokeResult is what a revocation did.
type RevokeResult struct {
	// Certificate as it stands after the call: revoked unless Queued.
	Certificate store.Certificate
	// Queued: the backend has not confirmed yet; Job carries the
	// revocation and asking again follows it.
	Queued     bool
	Job        int64
	RetryAfter time.Duration
}

// revocation is a request to revoke, from either door, once authorized.
type revocation struct {
	cert   store.Certificate
	leaf   *x509.Certificate
	reason *int
	actor  Actor
	client Client
	// operator: the operator's door (trusted), not revoke-cert.
	operator bool
}

// allowed are the reasons rv's door may give.
func (rv revocation) allowed() []int {
	if rv.operator {
		return operatorReasons
	}
	return clientReasons
}

// notYours answers every revoke-cert for a certificate the requester may
// not revoke, including one that is not known here or whose bytes are not
// the stored leaf's: the same answer for each, so the endpoint tells a
// stranger nothing about what was issued.
func notYours() *problem.Problem {
	return problem.UnauthorizedF("this certificate was not issued here to the requester, and the request is not signed by its key")
}

// Requester is who signed a revoke-cert: an account (kid) or a key
// (jwk), with the key's thumbprint.
type Requester struct {
	// Account is the kid's account; nil for a request signed by a jwk.
	Account *store.Account
	// Key is the jwk's public key; nil for a request signed by a kid.
	Key crypto.PublicKey
	// Thumbprint is the signing key's thumbprint.
	Thumbprint string
}

// RevokeCert revokes a certificate for revoke-cert (RFC 8555 §7.6),
// authorized by the account that ordered it, an account holding
// authorizations for all its identifiers, or the certificate's own key,
// which is compared with the key stored at issuance. decode reads the
// request's payload. Every refusal is counted and audited: on a row of its
// own when the requester is known, else in its source's summary row (see
// refusals.go). A refusal or a queued revocation that the client should
// retry later has RetryAfter set in the result.
func (au *Authority) RevokeCert(ctx context.Context, req Requester, decode func(v any) error, cl Client) (RevokeResult, error) {
	actor := Actor{Kind: ActorCertificateKey, ID: req.Thumbprint}
	if req.Account != nil {
		actor = Actor{Kind: ActorAccount, ID: req.Account.ID}
	}
	// known: the requester is one this profile can name — a valid account
	// (kid), or, once mayRevoke says so, one entitled to revoke the
	// certificate (its own key, the deactivated account that ordered it).
	// Anyone can sign with a throwaway jwk, so the refusals of the others
	// must not cost a durable row each.
	known := req.Account != nil && req.Account.Status == acme.StatusValid
	refuse := func(prob *problem.Problem, cert *store.Certificate, serial, why, kind string) error {
		au.metrics.RevocationRefused(au.cfg.Profile, kind)
		if !known {
			au.tallyRefusal(ctx, cl, kind)
			return prob
		}
		ev := au.event(ctx, acme.EventRevocationRefused, OutcomeRefused, actor, cl)
		ev.Serial, ev.Reason, ev.Detail = serial, string(prob.Type), why
		if cert != nil {
			ev.OrderID, ev.AccountID = cert.OrderID, cert.AccountID
		}
		au.audit(ctx, ev)
		return prob
	}

	var p struct {
		Certificate string `json:"certificate"`
		Reason      *int   `json:"reason"`
	}
	if err := decode(&p); err != nil {
		prob, ok := problem.As(err)
		if !ok {
			return RevokeResult{}, err
		}
		return RevokeResult{}, refuse(prob, nil, "", "payload is not a revocation request", RefusalMalformed)
	}
	der, err := base64.RawURLEncoding.DecodeString(p.Certificate)
	if err != nil || len(der) == 0 {
		return RevokeResult{}, refuse(problem.MalformedF("certificate must be a base64url-encoded DER certificate"), nil, "", "certificate is not base64url",
			RefusalMalformed)
	}
	submitted, err := x509.ParseCertificate(der)
	if err != nil {
		return RevokeResult{}, refuse(problem.MalformedF("the certificate %s", problem.DERFault(err)), nil, "", "certificate does not parse", RefusalMalformed)
	}
	serial := hex.EncodeToString(submitted.SerialNumber.Bytes())
	candidates, err := au.db.CertificatesBySerial(ctx, au.cfg.Profile, serial)
	if errors.Is(err, store.ErrNotFound) {
		return RevokeResult{}, refuse(notYours(), nil, serial, "no certificate with this serial was issued by this profile", RefusalUnknownCertificate)
	}
	if err != nil {
		return RevokeResult{}, err
	}
	// A serial is unique per issuing CA only: the certificate is the one
	// whose stored leaf is the submitted one, byte for byte (so submitted
	// is its leaf).
	cert, found := store.CertificateWithLeaf(candidates, der)
	if !found {
		// The refusal names the certificate it was mistaken for only
		// when there is one.
		var named *store.Certificate
		if len(candidates) == 1 {
			named = &candidates[0]
		}
		return RevokeResult{}, refuse(notYours(), named, serial, "the submitted certificate differs from every stored leaf with its serial",
			RefusalUnknownCertificate)
	}
	ok, err := au.mayRevoke(ctx, req, cert)
	if err != nil {
		return RevokeResult{}, err
	}
	if !ok {
		return RevokeResult{}, refuse(notYours(), &cert, serial, "signed neither by the certificate's key nor by an account that ordered it or holds authorizations for all its names",
			RefusalNotAuthorized)
	}
	known = true

	res, err := au.revoke(ctx, revocation{cert: cert, leaf: submitted, reason: p.Reason, actor: actor, client: cl})
	switch {
	case errors.Is(err, ErrAlreadyRevoked):
		return res, refuse(problem.AlreadyRevokedF("the certificate is already revoked"), &cert, serial, err.Error(), RefusalAlreadyRevoked)
	case errors.Is(err, ErrCertificateExpired):
		return res, refuse(problem.UnauthorizedF("the certificate expired at %s; an expired certificate is not revoked",
			cert.NotAfter.UTC().Format(time.RFC3339)), &cert, serial, err.Error(), RefusalExpired)
	case errors.Is(err, ErrBadRevocationReason):
		return res, refuse(problem.BadRevocationReasonF("reason %d is not one a client may choose: the reason must be %s (RFC 5280 CRLReason)",
			*p.Reason, reasonList(clientReasons)), &cert, serial, err.Error(), RefusalBadReason)
	case errors.Is(err, ErrUnpublishable):
		au.log.Error("revocation refused: its CRL cannot be published", zap.String("event", "revocation_unpublishable"),
			zap.String("profile", au.cfg.Profile), zap.String("order", cert.OrderID), zap.String("serial", serial), zap.Error(err))
		if errors.Is(err, signer.ErrIssuerUnavailable) {
			return RevokeResult{RetryAfter: 30 * time.Second}, refuse(problem.Unavailable("the key of the CA that issued this certificate cannot be reached now, "+
				"so no CRL could list its revocation; nothing was recorded: retry later"), &cert, serial, err.Error(), RefusalUnpublishable)
		}
		return res, refuse(problem.InternalF("this server no longer holds the CA that issued this certificate, so no CRL could list its revocation; "+
			"nothing was recorded: the operator's log has the cause"), &cert, serial, err.Error(), RefusalUnpublishable)
	case errors.Is(err, ErrRevocationRefused):
		// A 4xx: a client retries a 5xx, and each retry would ask the
		// backend again (the revocation_failed audit row has the reason).
		return res, problem.UnauthorizedF("the signer's backend refused to revoke this certificate; the operator can see why")
	case err != nil:
		return res, err
	case res.Queued:
		return res, problem.Unavailable("the revocation is queued at the signer's backend and not confirmed yet; retry to confirm")
	}
	return res, nil
}

// mayRevoke decides whether the request may revoke cert (RFC 8555 §7.6):
// signed by the certificate's key as stored at issuance, by the account
// that ordered it, or by an account of this profile holding valid
// authorizations for all its identifiers.
func (au *Authority) mayRevoke(ctx context.Context, req Requester, cert store.Certificate) (bool, error) {
	if req.Account == nil {
		spki, err := x509.MarshalPKIXPublicKey(req.Key)
		return err == nil && bytes.Equal(spki, cert.PublicKey), nil
	}
	// The HTTP front has refused a kid of an account that is not valid.
	if req.Account.ID == cert.AccountID {
		return true, nil
	}
	o, err := au.db.GetOrder(ctx, au.cfg.Profile, cert.OrderID)
	if err != nil {
		return false, err
	}
	return au.db.HoldsAuthorizations(ctx, au.cfg.Profile, req.Account.ID, o.Identifiers, au.clock.Now())
}

// storedLeaf returns the parsed leaf of a stored chain.
func storedLeaf(c store.Certificate) (*x509.Certificate, error) {
	der := c.LeafDER()
	if der == nil {
		return nil, fmt.Errorf("certificate %s: the stored chain holds no PEM block", c.ID)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: the stored leaf does not parse: %w", c.ID, err)
	}
	return leaf, nil
}

// RevokeOrder revokes the certificate of an order for an operator, who is
// trusted: no key or account is checked. It shares revoke-cert's tail.
// An operator asking to revoke an already revoked certificate for
// keyCompromise changes its recorded reason to keyCompromise (a key found
// compromised after the fact), where the revocation is in this server's
// ledger.
func (au *Authority) RevokeOrder(ctx context.Context, orderID string, reason *int, actor Actor) (RevokeResult, error) {
	cert, err := au.db.CertificateOfOrder(ctx, orderID)
	if err != nil {
		return RevokeResult{}, err
	}
	if cert.Profile != au.cfg.Profile {
		return RevokeResult{}, fmt.Errorf("%w: order %s is not of profile %s", store.ErrNotFound, orderID, au.cfg.Profile)
	}
	leaf, err := storedLeaf(cert)
	if err != nil {
		return RevokeResult{}, err
	}
	return au.revoke(ctx, revocation{cert: cert, leaf: leaf, reason: reason, actor: actor, operator: true})
}

// revoke is the tail both doors share: already revoked? → reason → the
// signer's route (the ledger, or a job the request waits on) → audit row.
func (au *Authority) revoke(ctx context.Context, rv revocation) (RevokeResult, error) {
	if rv.cert.RevokedAt.IsZero() && !au.clock.Now().Before(rv.cert.NotAfter) {
		return RevokeResult{Certificate: rv.cert}, fmt.Errorf("%w (its notAfter was %s)", ErrCertificateExpired, rv.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	byJob, err := au.revokesByJob(ctx)
	if err != nil {
		return RevokeResult{}, err
	}
	if byJob {
		return au.revokeByJob(ctx, rv)
	}
	if !reasonAllowed(rv.reason, rv.allowed()) {
		return RevokeResult{}, fmt.Errorf("%w: %d (allowed: %s)", ErrBadRevocationReason, *rv.reason, reasonList(rv.allowed()))
	}
	if !rv.cert.RevokedAt.IsZero() && !au.becomesKeyCompromise(rv) {
		return RevokeResult{Certificate: rv.cert}, ErrAlreadyRevoked
	}
	iss, publishes, err := au.revocationIssuer(ctx, rv.leaf)
	if err != nil {
		return RevokeResult{}, err
	}
	if !rv.cert.RevokedAt.IsZero() {
		if err := au.recordKeyCompromise(ctx, &rv); err != nil {
			return RevokeResult{}, err
		}
	} else if err := au.record(ctx, &rv, iss.KeyID); err != nil {
		return RevokeResult{}, err
	}
	if publishes {
		// The ledger row is committed; a crash before the job runs is
		// caught by the CRL refresh, which finds the CRL stale.
		if err := au.queueCRL(ctx, iss, true); err != nil {
			au.log.Error("queueing a CRL regeneration", zap.String("event", "crl_queue_failed"),
				zap.String("profile", au.cfg.Profile), zap.String("issuer", iss.KeyID), zap.Error(err))
		}
	}
	return RevokeResult{Certificate: rv.cert}, nil
}

// revocationIssuer is the CA whose CRL will list leaf's revocation, when
// the profile's signer publishes CRLs (publishes). It must be one the
// signer can still sign a CRL for — the CA that issues now, or one it
// issued from before — checked before anything is recorded: a revocation
// answered with success must reach a CRL. Otherwise the error wraps
// ErrUnpublishable. A delegate asks what the instances holding the signer
// published: a CA they have not published (yet) wraps
// signer.ErrIssuerUnavailable, asking later may succeed.
func (au *Authority) revocationIssuer(ctx context.Context, leaf *x509.Certificate) (iss signer.IssuerInfo, publishes bool, err error) {
	if au.Delegates() {
		p, err := au.published(ctx)
		if err != nil {
			return signer.IssuerInfo{}, false, fmt.Errorf("%w: %w", ErrUnpublishable, err)
		}
		if len(p.Issuers) == 0 {
			return signer.IssuerInfo{}, false, nil
		}
		if iss, err = publishedIssuer(p, signer.LeafIssuerKeyID(leaf)); err != nil {
			return signer.IssuerInfo{}, false, fmt.Errorf("%w: %w: %w", ErrUnpublishable, signer.ErrIssuerUnavailable, err)
		}
		return iss, true, nil
	}
	cs, ok := au.CRLSigner()
	if !ok {
		return signer.IssuerInfo{}, false, nil
	}
	iss, err = cs.LookupCRLIssuer(ctx, signer.LeafIssuerKeyID(leaf))
	if err != nil {
		return signer.IssuerInfo{}, false, fmt.Errorf("%w: %w", ErrUnpublishable, err)
	}
	return iss, true, nil
}

// record writes the revocation: the certificate's stamp, the ledger row
// and the certificate_revoked audit row, in one transaction. A concurrent
// revocation that won makes this ErrAlreadyRevoked. rv.cert is updated.
func (au *Authority) record(ctx context.Context, rv *revocation, issuer string) error {
	ev := au.event(ctx, acme.EventCertificateRevoked, OutcomeSuccess, rv.actor, rv.client)
	now := ev.At
	ev.OrderID, ev.AccountID, ev.Serial = rv.cert.OrderID, rv.cert.AccountID, rv.cert.Serial
	ev.Identifiers = leafIdentifiers(rv.leaf)
	if rv.reason != nil {
		ev.Reason = strconv.Itoa(*rv.reason)
	}
	ev.Jobs = au.AuditNotifyJobs(ev)
	_, err := au.db.RevokeCertificate(context.WithoutCancel(ctx), store.Revocation{
		CertificateID: rv.cert.ID, Profile: rv.cert.Profile, OrderID: rv.cert.OrderID, Serial: rv.cert.Serial,
		IssuerKeyID: issuer, Reason: rv.reason, RevokedAt: now, NotAfter: rv.cert.NotAfter,
		ActorKind: rv.actor.Kind, ActorID: rv.actor.ID,
	}, ev)
	if errors.Is(err, store.ErrWrongState) {
		return ErrAlreadyRevoked
	}
	if err != nil {
		return err
	}
	au.Notified(ev.Jobs)
	au.metrics.Revoked(au.cfg.Profile)
	au.log.Info("certificate revoked", zap.String("event", acme.EventCertificateRevoked), zap.String("profile", au.cfg.Profile),
		zap.String("order", rv.cert.OrderID), zap.String("serial", rv.cert.Serial), zap.Any("reason", rv.reason),
		zap.String("actor", rv.actor.Kind), zap.String("actor_id", rv.actor.ID))
	rv.cert.RevokedAt, rv.cert.Reason = now, rv.reason
	return nil
}

// becomesKeyCompromise reports whether rv, for an already revoked
// certificate, changes its reason to keyCompromise: only an operator may
// (a client that finds its key compromised later revokes by that key,
// which it can no longer trust to be only its own), only to
// keyCompromise, and only in this server's own ledger.
func (au *Authority) becomesKeyCompromise(rv revocation) bool {
	return rv.reason != nil && *rv.reason == acme.ReasonKeyCompromise &&
		(rv.cert.Reason == nil || *rv.cert.Reason != acme.ReasonKeyCompromise) && rv.operator
}

// recordKeyCompromise changes a recorded revocation's reason to
// keyCompromise with its audit row, in one transaction that also marks the
// issuer's CRL stale; the caller queues the regeneration.
func (au *Authority) recordKeyCompromise(ctx context.Context, rv *revocation) error {
	ev := au.event(ctx, acme.EventRevocationReasonChanged, OutcomeSuccess, rv.actor, rv.client)
	ev.OrderID, ev.AccountID, ev.Serial = rv.cert.OrderID, rv.cert.AccountID, rv.cert.Serial
	ev.Identifiers = leafIdentifiers(rv.leaf)
	keyCompromise := acme.ReasonKeyCompromise
	ev.Reason = strconv.Itoa(keyCompromise)
	ev.Detail = "reason changed from " + reasonText(rv.cert.Reason) + " to " + reasonText(&keyCompromise)
	err := au.db.ChangeRevocationReason(context.WithoutCancel(ctx), rv.cert.ID, acme.ReasonKeyCompromise, ev)
	if errors.Is(err, store.ErrWrongState) {
		return ErrAlreadyRevoked
	}
	if err != nil {
		return err
	}
	au.log.Info("revocation reason changed", zap.String("event", acme.EventRevocationReasonChanged), zap.String("profile", au.cfg.Profile),
		zap.String("order", rv.cert.OrderID), zap.String("serial", rv.cert.Serial), zap.Int("reason", acme.ReasonKeyCompromise),
		zap.String("actor", rv.actor.Kind), zap.String("actor_id", rv.actor.ID))
	rv.cert.Reason = &keyCompromise
	return nil
}

// reasonText says a recorded reason for a message or an audit detail:
// "4 (superseded)", or "none".
func reasonText(r *int) string {
	if r == nil {
		return "none"
	}
	return acme.ReasonText(*r)
}

// leafIdentifiers lists a leaf's names as ACME identifiers.
func leafIdentifiers(leaf *x509.Certificate) []acme.Identifier {
	var out []acme.Identifier
	for _, n := range leaf.DNSNames {
		out = append(out, acme.Identifier{Type: acme.IdentifierDNS, Value: n})
	}
	for _, ip := range leaf.IPAddresses {
		out = append(out, acme.Identifier{Type: acme.IdentifierIP, Value: ip.String()})
	}
	return out
}

// revokePayload is a signer_revoke job's payload.
type revokePayload struct {
	Profile     string `json:"profile"`
	Order       string `json:"order"`
	Certificate string `json:"certificate"`
	Reason      *int   `json:"reason,omitempty"`
	Actor       Actor  `json:"actor"`
	ClientIP    string `json:"client_ip,omitempty"`
	UserAgent   string `json:"user_agent,omitempty"`
}

// revokeByJob hands the revocation to a signer_revoke job keyed by the
// order and waits for it up to au.revokeWait (or the request's own
// deadline). Asking again while the job lives follows the same job; once
// it has revoked the certificate, the actor that queued it is answered
// with success, anyone else with ErrAlreadyRevoked.
func (au *Authority) revokeByJob(ctx context.Context, rv revocation) (RevokeResult, error) {
	if !reasonAllowed(rv.reason, rv.allowed()) {
		return RevokeResult{}, fmt.Errorf("%w: %d (allowed: %s)", ErrBadRevocationReason, *rv.reason, reasonList(rv.allowed()))
	}
	if !rv.cert.RevokedAt.IsZero() {
		if au.queuedBy(ctx, rv) {
			return RevokeResult{Certificate: rv.cert}, nil
		}
		// A backend's revocation cannot be re-reasoned from here: ACME
		// and scripts have no such request.
		return RevokeResult{Certificate: rv.cert}, ErrAlreadyRevoked
	}
	job, created, err := au.queue.Enqueue(ctx, jobs.Spec{
		Kind: RevokeKind, Key: rv.cert.OrderID, Lane: signer.SigningLane(au.cfg.Profile),
		Payload: revokePayload{Profile: au.cfg.Profile, Order: rv.cert.OrderID, Certificate: rv.cert.ID, Reason: rv.reason,
			Actor: rv.actor, ClientIP: rv.client.IP, UserAgent: rv.client.UserAgent},
		Deadline: rv.cert.NotAfter, MaxAttempts: revokeMaxAttempts,
	})
	if err != nil {
		return RevokeResult{}, err
	}
	if created {
		au.log.Info("revocation queued", zap.String("event", "revocation_queued"), zap.String("profile", au.cfg.Profile),
			zap.String("order", rv.cert.OrderID), zap.String("serial", rv.cert.Serial), zap.Int64("job", job.ID))
	}
	if !created {
		// Asking again follows the live job — with its reason: a backend
		// revocation cannot be re-reasoned from here, so another reason
		// is refused rather than answered as done.
		var queued revokePayload
		if jobs.Decode(&job, &queued) == nil && !sameReason(queued.Reason, rv.reason) {
			return RevokeResult{Certificate: rv.cert, Job: job.ID}, fmt.Errorf("%w: a revocation with reason %s is under way at the signer's backend (job %d)",
				ErrAlreadyRevoked, reasonText(queued.Reason), job.ID)
		}
	}
	return au.awaitRevocation(ctx, job, rv.cert)
}

// queuedBy reports whether the revocation that revoked rv.cert was carried
// by a signer_revoke job this same actor queued: their asking again is
// answered with success.
func (au *Authority) queuedBy(ctx context.Context, rv revocation) bool {
	js, err := au.queue.List(ctx, store.JobFilter{Kind: RevokeKind, Key: rv.cert.OrderID, Status: store.JobDone, Limit: 1})
	if err != nil || len(js) == 0 {
		return false
	}
	var p revokePayload
	if jobs.Decode(&js[0], &p) != nil {
		return false
	}
	return p.Actor == rv.actor && sameReason(p.Reason, rv.reason)
}

// sameReason reports whether two revocation reasons are one (reasonCode).
func sameReason(a, b *int) bool { return reasonCode(a) == reasonCode(b) }

// awaitRevocation polls the job until it settles or the wait ends.
func (au *Authority) awaitRevocation(ctx context.Context, job jobs.Job, cert store.Certificate) (RevokeResult, error) {
	until := time.Now().Add(au.revokeWait)
	if d, ok := ctx.Deadline(); ok && d.Add(-100*time.Millisecond).Before(until) {
		until = d.Add(-100 * time.Millisecond)
	}
	pause := 20 * time.Millisecond
	for {
		switch job.Status {
		case store.JobDone:
			c, err := au.db.GetCertificate(ctx, au.cfg.Profile, cert.ID)
			if err != nil {
				return RevokeResult{}, err
			}
			if c.RevokedAt.IsZero() {
				return RevokeResult{}, fmt.Errorf("%w: job %d finished without recording the revocation", ErrRevocationFailed, job.ID)
			}
			return RevokeResult{Certificate: c, Job: job.ID}, nil
		case store.JobFailed, store.JobCancelled:
			// A job keeps its outcome as text: runRevoke fails it with
			// the signer's error, which says so when the backend refused.
			if job.Status == store.JobFailed && strings.Contains(job.LastError, signer.ErrRevocationRefused.Error()) {
				return RevokeResult{Job: job.ID}, fmt.Errorf("%w: job %d: %s", ErrRevocationRefused, job.ID, job.LastError)
			}
			if job.Status == store.JobCancelled {
				return RevokeResult{Job: job.ID}, fmt.Errorf("%w: %w (job %d: %s)", ErrRevocationFailed, ErrRevocationCancelled, job.ID, job.LastError)
			}
			return RevokeResult{Job: job.ID}, fmt.Errorf("%w: job %d is %s: %s", ErrRevocationFailed, job.ID, job.Status, job.LastError)
		}
		if !time.Now().Add(pause).Before(until) {
			after := time.Second
			if d := job.RunAt.Sub(au.clock.Now()); d > after {
				after = min(d, time.Hour)
			}
			return RevokeResult{Certificate: cert, Queued: true, Job: job.ID, RetryAfter: after.Round(time.Second)}, nil
		}
		select {
		case <-ctx.Done():
			return RevokeResult{}, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
		var err error
		if job, err = au.queue.Get(ctx, job.ID); err != nil {
			return RevokeResult{}, err
		}
	}
}

// runRevoke does one attempt of a signer_revoke job.
func (au *Authority) runRevoke(ctx context.Context, p revokePayload) jobs.Outcome {
	cert, err := au.db.GetCertificate(ctx, au.cfg.Profile, p.Certificate)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Failed("no certificate " + p.Certificate + " in profile " + au.cfg.Profile)
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	if !cert.RevokedAt.IsZero() {
		return jobs.Done()
	}
	leaf, err := storedLeaf(cert)
	if err != nil {
		return jobs.Failed(err.Error())
	}
	if err := au.signer.Revoke(ctx, leaf, p.Reason); err != nil {
		if ctx.Err() != nil {
			return jobs.RetryAfter("interrupted: "+err.Error(), 0)
		}
		if errors.Is(err, signer.ErrRevocationRefused) {
			// The backend said no; the abandon audits and logs it.
			return jobs.Failed(err.Error())
		}
		if we, ok := errors.AsType[*signer.WaitError](err); ok {
			// The backend asked to be left alone a while (a rate limit,
			// a maintenance window): asking sooner would only be refused
			// again, and a rate limit only lengthened.
			au.log.Info("revocation at the backend waits as the backend asked", zap.String("event", "revocation_attempt_deferred"),
				zap.String("profile", au.cfg.Profile), zap.String("order", p.Order), zap.Duration("retry_after", we.After), zap.Error(err))
			if we.Spend {
				return jobs.RetryNoSooner(err.Error(), we.After)
			}
			return jobs.RetryAfter(err.Error(), we.After)
		}
		au.log.Warn("revocation at the backend failed", zap.String("event", "revocation_attempt_failed"),
			zap.String("profile", au.cfg.Profile), zap.String("order", p.Order), zap.Error(err))
		return jobs.Retry(err.Error())
	}
	rv := revocation{cert: cert, leaf: leaf, reason: p.Reason, actor: p.Actor, client: Client{IP: p.ClientIP, UserAgent: p.UserAgent}}
	if err := au.record(ctx, &rv, ""); err != nil && !errors.Is(err, ErrAlreadyRevoked) {
		return jobs.Retry("recording the revocation: " + err.Error())
	}
	return jobs.Done()
}
