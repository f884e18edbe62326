package relay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// maxSteps bounds the state transitions one attempt walks the upstream
// order through (pending → ready → processing → valid, and a re-read).
const maxSteps = 8

// relay takes the upstream order of ro as far as it goes: it creates it
// (once: its URL is recorded before anything else happens), solves the
// authorizations still pending, finalizes with the client's CSR when the
// order is ready, waits while it is processing, and returns the chain
// (DER, leaf first) once it is valid.
//
// No upstream order is finalized before a durable record names it for
// its local order: the URL of an order placed here is recorded by a
// durable write beside the requests before the finalize (recordGate); a
// prepared one is named by its relay_prepared job, stored durably before
// its preparation answered anything upstream. The mapping itself, stored
// lazily at finalize (store.CreateRelayOrder), needs no flush for that.
func (s *Signer) relay(ctx context.Context, c *acme.Client, rec *recorder, b *signer.Binding, log *zap.Logger, ro store.RelayOrder) (signer.IssueOutcome, error) {
	acct, err := s.account(ctx, c, b.Profile)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	var (
		order acme.Order
		gate  *recordGate // nil: the mapping is durable
		claim *placement  // with prepare_upstream on: the claim to place it
	)
	if ro.UpstreamOrderURL == "" && s.opts.PrepareUpstream {
		if ro.UpstreamOrderURL, claim, err = s.adoptPrepared(ctx, b, ro.OrderID); err != nil {
			return signer.IssueOutcome{}, err
		}
	}
	switch {
	case ro.UpstreamOrderURL == "":
		order, gate, err = s.newOrder(ctx, c, acct, b, log, ro, claim, "")
	default:
		order, err = c.GetOrder(ctx, acct, acme.Order{Location: ro.UpstreamOrderURL})
		if ofAnotherUpstream(ctx, c, ro.UpstreamOrderURL, err) {
			log.Info("upstream order of another upstream placed again at this one", zap.String("event", "relay_upstream_moved"),
				zap.String("profile", b.Profile), zap.String("order", ro.OrderID), zap.String("upstream_order", s.secrets.text(ro.UpstreamOrderURL)),
				zap.String("read_error", s.secrets.text(err.Error())))
			order, gate, err = s.newOrder(ctx, c, acct, b, log, ro, nil, ro.UpstreamOrderURL)
			break
		}
		order.Location = ro.UpstreamOrderURL
		var spent string
		if err == nil {
			spent, err = s.spentPrepared(ctx, c, acct, b, ro.OrderID, order)
		}
		if err == nil && spent != "" {
			log.Info("prepared upstream order replaced", zap.String("event", "relay_prepared_replaced"), zap.String("profile", b.Profile),
				zap.String("order", ro.OrderID), zap.String("upstream_order", s.secrets.text(order.Location)), zap.String("reason", s.secrets.text(spent)))
			order, gate, err = s.newOrder(ctx, c, acct, b, log, ro, nil, order.Location)
		}
	}
	defer gate.finish()
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	poll := s.poller(maxProcessingWait, ro.OrderID)
	for steps := 0; steps < maxSteps; steps++ {
		switch order.Status {
		case acme.StatusPending:
			next, err := s.authorize(ctx, c, rec, acct, order, ro.OrderID)
			if err != nil {
				return signer.IssueOutcome{}, err
			}
			if next.Status != "" {
				// The order was read after its last authorization's
				// challenge: no need to read it again.
				order = next
				continue
			}
		case acme.StatusReady:
			if gate != nil {
				recorded, err := gate.wait(ctx)
				if err != nil {
					return signer.IssueOutcome{}, fmt.Errorf("recording the upstream order: %w", err)
				}
				gate.finish()
				gate = nil
				if recorded != order.Location {
					// An earlier attempt recorded its upstream order
					// first: that one is relayed, this one never
					// finalized.
					if order, err = c.GetOrder(ctx, acct, acme.Order{Location: recorded}); err != nil {
						return signer.IssueOutcome{}, err
					}
					order.Location = recorded
					continue
				}
			}
			// acmez does not wait here (PollTimeout, see client): it
			// returns the order as the finalize left it, and an order
			// still processing is waited for below, with backoff.
			if err := urlProblem("finalize", order.Finalize); err != nil {
				return signer.IssueOutcome{}, err
			}
			order, err = c.FinalizeOrder(ctx, acct, order, ro.CSR)
			if err != nil && order.Status == acme.StatusInvalid {
				return signer.IssueOutcome{}, permanent("the upstream order %s became invalid at finalize: %w", order.Location, problemErr(order.Error))
			}
			if err != nil && order.Status != acme.StatusProcessing && order.Status != acme.StatusValid {
				return signer.IssueOutcome{}, fmt.Errorf("finalizing the upstream order: %w", err)
			}
			continue
		case acme.StatusProcessing:
			// Wait as the upstream asks, or with backoff when it does not
			// say; a long wait ends the attempt, and classify turns the
			// recorded Retry-After into the job's delay.
			d, err := poll.wait(rec.lastResponse().retryAfter)
			if err != nil {
				return signer.IssueOutcome{}, fmt.Errorf("the upstream order %s is processing: %w", order.Location, err)
			}
			if err := pause(ctx, d); err != nil {
				return signer.IssueOutcome{}, err
			}
			steps-- // waiting is bounded by the poller, not the steps
		case acme.StatusValid:
			return s.download(ctx, c, acct, order, ro, log)
		case acme.StatusInvalid:
			if order.Error != nil {
				// An upstream that finalizes asynchronously (Boulder)
				// states its refusal of the CSR or a name here.
				return signer.IssueOutcome{}, permanent("the upstream order %s is invalid: %w", order.Location, problemErr(order.Error))
			}
			reason, failed := s.invalidReason(ctx, c, acct, order)
			return signer.IssueOutcome{}, aboutName(permanent("the upstream order %s is invalid: %s", order.Location, reason), failed, "")
		default:
			return signer.IssueOutcome{}, fmt.Errorf("the upstream order %s has status %q", order.Location, order.Status)
		}
		location := order.Location
		if order, err = c.GetOrder(ctx, acct, acme.Order{Location: location}); err != nil {
			return signer.IssueOutcome{}, err
		}
		order.Location = location
	}
	return signer.IssueOutcome{}, fmt.Errorf("the upstream order %s is still %s", order.Location, order.Status)
}

// newOrder places the upstream order for ro and starts recording its URL
// (a durable write), which the returned gate waits for. If an earlier
// attempt recorded one meanwhile, the gate answers that one, which the
// relay then uses instead. With a claim (prepare_upstream on), the order
// is placed within it, and the placement records it too, for the
// preparations of the order on other instances. With replacing (the URL
// of a prepared upstream order that can no longer be finalized), the new
// order is recorded in its place.
func (s *Signer) newOrder(ctx context.Context, c *acme.Client, acct acme.Account, b *signer.Binding, log *zap.Logger, ro store.RelayOrder, claim *placement, replacing string) (acme.Order, *recordGate, error) {
	placeFn := func(ctx context.Context) (acme.Order, error) {
		want, err := s.orderRequest(ctx, c, b, ro)
		if err != nil {
			return acme.Order{}, err
		}
		return s.placeOrder(ctx, c, acct, b, log, ro, want)
	}
	var (
		order acme.Order
		err   error
	)
	if claim != nil {
		order, err = claim.place(ctx, s.clock.Now(), placeFn)
	} else {
		order, err = placeFn(ctx)
	}
	if err != nil {
		return order, nil, err
	}
	placed := order.Location
	gate := startRecord(func() (string, error) {
		var (
			recorded string
			err      error
		)
		if replacing != "" {
			recorded, err = b.DB.ReplaceRelayUpstreamOrder(ctx, ro.OrderID, replacing, placed, s.clock.Now())
		} else {
			recorded, err = b.DB.SetRelayUpstreamOrder(ctx, ro.OrderID, placed, s.clock.Now())
		}
		if err != nil {
			return "", err
		}
		log.Info("upstream order created", zap.String("event", "relay_upstream_order"), zap.String("profile", b.Profile),
			zap.String("order", ro.OrderID), zap.String("upstream_order", s.secrets.text(recorded)))
		if claim != nil {
			if _, err := claim.record(context.WithoutCancel(ctx), recorded, s.clock.Now()); err != nil {
				// The relay carries on with its recorded order; only a
				// preparation starting late could miss it.
				log.Warn("recording the placement of the upstream order", zap.String("event", "relay_placement_unrecorded"),
					zap.String("profile", b.Profile), zap.String("order", ro.OrderID), zap.Error(err))
			}
		}
		return recorded, nil
	})
	return order, gate, nil
}

// orderRequest is the upstream newOrder for the local order of ro.
func (s *Signer) orderRequest(ctx context.Context, c *acme.Client, b *signer.Binding, ro store.RelayOrder) (want acme.Order, err error) {
	want = acme.Order{Identifiers: identifiersOf(ro.Identifiers)}
	if !ro.NotBefore.IsZero() {
		nb := ro.NotBefore
		want.NotBefore = &nb
	}
	if !ro.NotAfter.IsZero() {
		na := ro.NotAfter
		want.NotAfter = &na
	}
	if want.Profile, err = s.upstreamProfile(ctx, c, b, ro); err != nil {
		return acme.Order{}, err
	}
	if want.Replaces, err = s.upstreamReplaces(ctx, c, ro); err != nil {
		return acme.Order{}, err
	}
	return want, nil
}

// placeOrder places want upstream; it does not record it.
func (s *Signer) placeOrder(ctx context.Context, c *acme.Client, acct acme.Account, b *signer.Binding, log *zap.Logger, ro store.RelayOrder, want acme.Order) (acme.Order, error) {
	order, err := c.NewOrder(ctx, acct, want)
	if err != nil && want.Replaces != "" && mayBeRefusingReplaces(err) {
		// "replaces" is a hint the upstream may refuse while it would
		// take the order: it counts a replacement we do not (an earlier
		// local order that failed after its upstream order was placed:
		// alreadyReplaced), the certificate was issued to the relay's
		// earlier upstream account (unauthorized) or by another CA (an
		// earlier upstream, the local CA the profile signed with before:
		// malformed; Pebble after a restart: 500).
		// The certificate is renewed all the same, without the hint; a
		// refusal that is not about it comes again and is answered.
		log.Info("the upstream refused the order with replaces; ordering without it", zap.String("event", "relay_replaces_refused"),
			zap.String("profile", b.Profile), zap.String("order", ro.OrderID), zap.String("replaces", want.Replaces),
			zap.String("refusal", s.secrets.reasonOf(err)))
		want.Replaces = ""
		order, err = c.NewOrder(ctx, acct, want)
	}
	if err != nil {
		return order, fmt.Errorf("creating the upstream order: %w", err)
	}
	if order.Location == "" {
		return order, errors.New("the upstream created an order without a Location")
	}
	if err := urlProblem("order", order.Location); err != nil {
		return acme.Order{}, fmt.Errorf("creating the upstream order: %w", err)
	}
	return order, nil
}

// mayBeRefusingReplaces says whether err, the upstream's answer to a
// newOrder carrying "replaces", may be a refusal of that field: a problem
// document that is not about our rate, nonce or account.
func mayBeRefusingReplaces(err error) bool {
	var p acme.Problem
	if !errors.As(err, &p) {
		return false
	}
	switch p.Type {
	case acme.ProblemTypeRateLimited, acme.ProblemTypeBadNonce, acme.ProblemTypeAccountDoesNotExist, acme.ProblemTypeUserActionRequired:
		return false
	}
	return p.Status != http.StatusTooManyRequests
}

// upstreamReplaces is the "replaces" of the upstream order for ro (RFC
// 9773 §5): the certID of the certificate the local order replaces, when
// the upstream offers renewal information; "" otherwise. The relayed
// certificate was issued by the upstream, so the certID the client
// computed from its AKI and serial names it upstream too.
func (s *Signer) upstreamReplaces(ctx context.Context, c *acme.Client, ro store.RelayOrder) (string, error) {
	if ro.Replaces == "" {
		return "", nil
	}
	o, err := s.offer(ctx, c)
	if err != nil {
		return "", err
	}
	if !o.renewalInfo {
		return "", nil
	}
	return ro.Replaces, nil
}

// upstreamProfile is the upstream certificate profile the order of ro
// asks for: its certificate profile's upstream_profile, as the profile
// offers it now; "" for the upstream's default. A name the upstream's
// directory does not offer is the operator's mistake, which no retry
// mends: the relay fails, naming the setting.
func (s *Signer) upstreamProfile(ctx context.Context, c *acme.Client, b *signer.Binding, ro store.RelayOrder) (string, error) {
	if ro.CertificateProfile == "" || b.CertificateProfile == nil {
		return "", nil
	}
	cp, ok := b.CertificateProfile(ro.CertificateProfile)
	if !ok {
		return "", permanent("the order's certificate profile %q is no longer offered", ro.CertificateProfile)
	}
	if cp.UpstreamProfile == "" {
		return "", nil
	}
	o, err := s.offer(ctx, c)
	if err != nil {
		return "", err
	}
	if !slices.Contains(o.profiles, cp.UpstreamProfile) {
		return "", permanent("certificate_profiles.%s.upstream_profile: the upstream does not offer the profile %q (it offers: %s)",
			ro.CertificateProfile, cp.UpstreamProfile, orNone(strings.Join(o.profiles, ", ")))
	}
	return cp.UpstreamProfile, nil
}

// maxProcessingWait is the longest an attempt waits in place for an
// upstream order that is processing, maxValidationWait for an upstream
// authorization being validated (acmez's default).
const (
	maxProcessingWait = time.Minute
	maxValidationWait = 5 * time.Minute
)

// authorize solves every authorization of order that is still pending;
// valid ones (from an earlier attempt, or reused by the upstream) are
// skipped. When it solved the order's last authorization, it waited for
// it by reading the order, and returns the order as last read (once no
// longer pending); else a zero Order, and the caller reads it.
func (s *Signer) authorize(ctx context.Context, c *acme.Client, rec *recorder, acct acme.Account, order acme.Order, orderID string) (acme.Order, error) {
	if err := authorizationsProblem(order); err != nil {
		return acme.Order{}, err
	}
	var read acme.Order
	for i, u := range order.Authorizations {
		if err := urlProblem("authorization", u); err != nil {
			return acme.Order{}, err
		}
		authz, err := c.GetAuthorization(ctx, acct, u)
		if err != nil {
			return acme.Order{}, fmt.Errorf("reading an upstream authorization: %w", err)
		}
		switch authz.Status {
		case acme.StatusValid:
			continue
		case acme.StatusPending:
		default:
			return acme.Order{}, aboutName(permanent("the upstream authorization for %s is %s: %s", authz.IdentifierValue(), authz.Status, challengeProblems(authz)),
				authz, "")
		}
		var via *acme.Order
		if i == len(order.Authorizations)-1 {
			// Every other authorization is valid: the order is ready
			// once this one is (RFC 8555 §7.1.6), and reading it says
			// so with the request the relay makes next anyway.
			read = acme.Order{Location: order.Location}
			via = &read
		}
		if err := s.solve(ctx, c, rec, acct, authz, orderID, via); err != nil {
			return acme.Order{}, err
		}
	}
	return read, nil
}

// solve answers one pending authorization with the profile's strategy
// and waits for the upstream's verdict. With via (the order's Location),
// it waits by reading the order rather than the authorization, whose
// verdict the order's status then is, and leaves the order in via; the
// authorization is read only for the reason when the order is invalid.
func (s *Signer) solve(ctx context.Context, c *acme.Client, rec *recorder, acct acme.Account, authz acme.Authorization, orderID string, via *acme.Order) error {
	chal, err := s.pick(authz)
	if err != nil {
		return err
	}
	var sol acmez.Solver
	switch s.opts.Challenge {
	case ChallengeDNS01:
		sol = s.opts.DNS
	case ChallengeHTTP01:
		sol = s.http
	}
	if sol != nil {
		// Presented again when an earlier attempt already triggered the
		// challenge: its record may have been cleaned up since.
		if err := sol.Present(ctx, chal); err != nil {
			return fmt.Errorf("presenting the %s challenge for %s: %w", chal.Type, authz.IdentifierValue(), err)
		}
		defer func() { _ = sol.CleanUp(context.WithoutCancel(ctx), chal) }()
		if w, ok := sol.(acmez.Waiter); ok {
			if err := w.Wait(ctx, chal); err != nil {
				return fmt.Errorf("waiting for the %s challenge for %s to propagate: %w", chal.Type, authz.IdentifierValue(), err)
			}
		}
	}
	if chal.Status == acme.StatusPending || chal.Status == "" {
		if _, err := c.InitiateChallenge(ctx, acct, chal); err != nil {
			if authz, err = s.triggeredElsewhere(ctx, c, acct, authz, chal, err); err != nil {
				return fmt.Errorf("triggering the %s challenge for %s: %w", chal.Type, authz.IdentifierValue(), err)
			}
		}
	}
	// Read the authorization until the upstream has decided, as it asks
	// or with backoff ("The client SHOULD NOT begin polling until it has
	// seen the validation request", RFC 8555 §7.5.1: the first wait is
	// the signer's PollInterval).
	poll := s.poller(maxValidationWait, orderID)
	for authz.Status == acme.StatusPending || authz.Status == acme.StatusProcessing || authz.Status == "" {
		d, err := poll.wait(rec.lastResponse().retryAfter)
		if err != nil {
			return fmt.Errorf("waiting for the upstream to validate %s: %w", authz.IdentifierValue(), err)
		}
		if err := pause(ctx, d); err != nil {
			return err
		}
		if via != nil {
			o, err := c.GetOrder(ctx, acct, acme.Order{Location: via.Location})
			if err != nil {
				return fmt.Errorf("waiting for the upstream to validate %s: %w", authz.IdentifierValue(), err)
			}
			o.Location = via.Location
			switch o.Status {
			case acme.StatusPending:
				continue
			case acme.StatusReady, acme.StatusProcessing, acme.StatusValid:
				*via = o
				return nil
			}
			// Invalid (or unknown): the authorization says why.
			via = nil
		}
		location := authz.Location
		if authz, err = c.GetAuthorization(ctx, acct, location); err != nil {
			return fmt.Errorf("waiting for the upstream to validate %s: %w", authz.IdentifierValue(), err)
		}
		authz.Location = location
	}
	switch authz.Status {
	case acme.StatusValid:
		return nil
	case acme.StatusInvalid:
		return aboutName(permanent("the upstream could not validate %s by %s: %s", authz.IdentifierValue(), chal.Type, challengeProblems(authz)),
			authz, chal.Type)
	}
	return permanent("the upstream authorization for %s became %s", authz.IdentifierValue(), authz.Status)
}

// triggeredElsewhere decides on the upstream's refusal (err) to trigger
// chal: when the challenge was triggered since the authorization was
// read — by another party answering the same upstream order (its
// preparation, in this process or on another instance; an attempt that
// lost its lease), which the upstream then refuses to trigger again
// (Pebble: malformed, "only status pending") — it returns the
// authorization as read again, whose verdict the caller waits for like
// its own; otherwise it returns err.
func (s *Signer) triggeredElsewhere(ctx context.Context, c *acme.Client, acct acme.Account, authz acme.Authorization, chal acme.Challenge, err error) (acme.Authorization, error) {
	var p acme.Problem
	if !errors.As(err, &p) {
		return authz, err
	}
	again, rerr := c.GetAuthorization(ctx, acct, authz.Location)
	if rerr != nil {
		return authz, err
	}
	again.Location = authz.Location
	if again.Status != acme.StatusPending {
		return again, nil // decided (or deactivated): the caller says so
	}
	for _, ch := range again.Challenges {
		if ch.URL == chal.URL && ch.Status != acme.StatusPending && ch.Status != "" {
			return again, nil
		}
	}
	return authz, err
}

// pick chooses the challenge the strategy answers.
func (s *Signer) pick(authz acme.Authorization) (acme.Challenge, error) {
	var offered []string
	for _, ch := range authz.Challenges {
		offered = append(offered, ch.Type)
	}
	want := ""
	switch s.opts.Challenge {
	case ChallengeBypass:
		if len(authz.Challenges) > 0 {
			return checkedChallenge(authz.Challenges[0], false)
		}
	case ChallengeDNS01:
		want = acme.ChallengeTypeDNS01
	case ChallengeHTTP01:
		if authz.Wildcard {
			return acme.Challenge{}, permanent("%s cannot be validated by http-01 upstream", authz.IdentifierValue())
		}
		want = acme.ChallengeTypeHTTP01
	}
	for _, ch := range authz.Challenges {
		if ch.Type == want {
			return checkedChallenge(ch, true)
		}
	}
	return acme.Challenge{}, permanent("the upstream offers no %s challenge for %s (it offers: %s)",
		orNone(want), authz.IdentifierValue(), orNone(strings.Join(offered, ", ")))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// download fetches the upstream's chain and checks that its leaf is the
// order's (signer.CheckLeaf) and that each of its certificates is signed
// by the next (checkLinks): the chain is what the client gets. The
// upstream's alternate chains (a cross-signed issuer beside its own, RFC
// 8555 §7.4.2) come along, up to store.MaxAlternateChains of the first
// maxAlternateTries distinct ones linked, so that a
// client preferring another root gets it from the relay as it would
// upstream; one that cannot be downloaded or is not a chain for the same
// leaf is left out (logged), the certificate is not held up for it.
func (s *Signer) download(ctx context.Context, c *acme.Client, acct acme.Account, order acme.Order, ro store.RelayOrder, log *zap.Logger) (signer.IssueOutcome, error) {
	if order.Certificate == "" {
		return signer.IssueOutcome{}, fmt.Errorf("the upstream order %s is valid without a certificate URL", order.Location)
	}
	if err := urlProblem("certificate", order.Certificate); err != nil {
		return signer.IssueOutcome{}, err
	}
	body, altURLs, err := s.fetchChain(ctx, c, acct, order.Certificate)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	ders := signer.ChainDERs(body)
	if len(ders) == 0 {
		return signer.IssueOutcome{}, errors.New("the upstream's certificate chain holds no certificate")
	}
	leaf, err := x509.ParseCertificate(ders[0])
	if err != nil {
		return signer.IssueOutcome{}, fmt.Errorf("the upstream's leaf does not parse: %w", err)
	}
	csr, err := x509.ParseCertificateRequest(ro.CSR)
	if err != nil {
		return signer.IssueOutcome{}, permanent("the stored CSR does not parse: %w", err)
	}
	if err := signer.CheckLeaf(leaf, csr.PublicKey, ro.Identifiers); err != nil {
		return signer.IssueOutcome{}, permanent("the upstream issued a certificate that is not the order's: %w", err)
	}
	if err := checkLinks(ders); err != nil {
		// The certificate is issued and stays downloadable: the next
		// attempt downloads it again rather than order another, and a
		// chain the upstream keeps serving broken fails the order once
		// the attempts are spent, this reason its last error.
		return signer.IssueOutcome{}, fmt.Errorf("the upstream's certificate chain is broken: %w", err)
	}
	out := signer.IssueOutcome{Chain: ders}
	altURLs = distinctAlternates(altURLs, order.Certificate)
	if len(altURLs) > maxAlternateTries {
		log.Warn("the upstream offers more alternate chains than are tried; the rest are left out", zap.String("event", "relay_alternates_untried"),
			zap.String("order", ro.OrderID), zap.Int("offered", len(altURLs)), zap.Int("tried", maxAlternateTries))
		altURLs = altURLs[:maxAlternateTries]
	}
	for _, u := range altURLs {
		if len(out.Alternates) == store.MaxAlternateChains {
			log.Warn("the upstream offers more alternate chains than are kept", zap.String("event", "relay_alternates_dropped"),
				zap.String("order", ro.OrderID), zap.Int("offered", len(altURLs)), zap.Int("kept", store.MaxAlternateChains))
			break
		}
		alt, _, err := s.fetchChain(ctx, c, acct, u)
		if err != nil {
			if ctx.Err() != nil {
				return signer.IssueOutcome{}, err
			}
			log.Warn("an alternate chain of the upstream's certificate could not be downloaded; left out", zap.String("event", "relay_alternate_skipped"),
				zap.String("order", ro.OrderID), zap.String("url", s.secrets.text(u)), zap.Error(s.secrets.err(err)))
			continue
		}
		altDERs := signer.ChainDERs(alt)
		if len(altDERs) == 0 || !bytes.Equal(altDERs[0], ders[0]) {
			log.Warn("an alternate chain of the upstream's certificate is not a chain for its leaf; left out", zap.String("event", "relay_alternate_skipped"),
				zap.String("order", ro.OrderID), zap.String("url", s.secrets.text(u)))
			continue
		}
		if err := checkLinks(altDERs); err != nil {
			log.Warn("an alternate chain of the upstream's certificate is broken; left out", zap.String("event", "relay_alternate_skipped"),
				zap.String("order", ro.OrderID), zap.String("url", s.secrets.text(u)), zap.Error(s.secrets.err(err)))
			continue
		}
		out.Alternates = append(out.Alternates, altDERs)
	}
	return out, nil
}

// distinctAlternates is urls in order, each once, without the chain's
// own URL and those longer than maxUpstreamURL.
func distinctAlternates(urls []string, own string) []string {
	seen := map[string]bool{own: true}
	out := urls[:0:0]
	for _, u := range urls {
		if !seen[u] && urlProblem("alternate chain", u) == nil {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
}

// checkLinks says whether a chain (DER, leaf first) is one: each of its
// certificates parses and is signed by the next (crypto/x509's
// CheckSignatureFrom, which also wants the signer to be a CA allowed to
// sign certificates). The client is handed the chain as it is, and a
// TLS peer given an issuer that did not sign the leaf — an upstream
// serving the intermediate of another hierarchy, or its chain out of
// order — fails every handshake with it. The last certificate, whose
// issuer the chain leaves out (a root the peer holds), is not checked;
// nor is a link above the leaf's issuer signed with an algorithm
// crypto/x509 no longer verifies (SHA-1: an old cross-sign toward a
// legacy root, which a peer trusting the newer root never reaches).
func checkLinks(ders [][]byte) error {
	certs := make([]*x509.Certificate, len(ders))
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("certificate %d of the chain does not parse: %w", i+1, err)
		}
		certs[i] = c
	}
	for i := 0; i+1 < len(certs); i++ {
		err := certs[i].CheckSignatureFrom(certs[i+1])
		if _, insecure := errors.AsType[x509.InsecureAlgorithmError](err); insecure && i > 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("certificate %d of the chain%s is not signed by certificate %d%s: %w",
				i+1, subjectOf(certs[i]), i+2, subjectOf(certs[i+1]), err)
		}
	}
	return nil
}

// subjectOf is c's subject for an operator's reason, in parentheses
// after a blank; "" when it has none (a leaf named by its SANs alone).
func subjectOf(c *x509.Certificate) string {
	if len(c.Subject.Names) == 0 {
		return ""
	}
	return " (" + c.Subject.String() + ")"
}

// invalidReason says why the upstream order is invalid: its error, else
// what its authorizations say — an order states no error when one of
// its authorizations failed, expired or was deactivated (RFC 8555
// §7.1.6), and an expiry (the upstream down for longer than its pending
// authorizations live: an hour at Pebble; a valid one past its own
// lifetime, an hour there too) is worth naming — else its own expiry
// (an order is invalid once it expired, whatever its authorizations).
//
// failed is the first of its authorizations that is invalid, if any
// (zero otherwise): its challenge's error says why (aboutName).
func (s *Signer) invalidReason(ctx context.Context, c *acme.Client, acct acme.Account, order acme.Order) (reason string, failed acme.Authorization) {
	if order.Error != nil {
		return problemText(order.Error), failed
	}
	now := s.clock.Now()
	past := func(t time.Time) bool { return !t.IsZero() && t.Before(now) }
	var out []string
	authorizations := order.Authorizations
	if err := authorizationsProblem(order); err != nil {
		authorizations = nil // none is read
		out = append(out, "its authorizations were not read: "+err.Error())
	}
	for _, u := range authorizations {
		if urlProblem("authorization", u) != nil {
			continue
		}
		authz, err := c.GetAuthorization(ctx, acct, u)
		if err != nil {
			continue
		}
		switch {
		case authz.Status == acme.StatusInvalid:
			out = append(out, fmt.Sprintf("its authorization for %s is invalid: %s", authz.IdentifierValue(), challengeProblems(authz)))
			if failed.Status == "" {
				failed = authz
			}
		case authz.Status == acme.StatusExpired || (authz.Status == acme.StatusPending || authz.Status == acme.StatusValid) && past(authz.Expires):
			out = append(out, fmt.Sprintf("its authorization for %s expired at %s", authz.IdentifierValue(), authz.Expires.UTC().Format(time.RFC3339)))
		case authz.Status != acme.StatusValid && authz.Status != acme.StatusPending:
			out = append(out, fmt.Sprintf("its authorization for %s is %s", authz.IdentifierValue(), authz.Status))
		}
	}
	if len(out) == 0 && past(order.Expires) {
		out = append(out, "it expired at "+order.Expires.UTC().Format(time.RFC3339))
	}
	if len(out) == 0 {
		return "no reason given", failed
	}
	return strings.Join(out, "; "), failed
}

// aboutName is err (a permanentError) carrying, for classify, the
// problem the upstream stated on authz's challenge of type chalType (any
// challenge's when "" or when that one states none) as a nameProblem:
// the refusal a validation failure is for the client. err as it is when
// authz states no problem.
func aboutName(err error, authz acme.Authorization, chalType string) error {
	var p *acme.Problem
	for _, ch := range authz.Challenges {
		if ch.Error != nil && (ch.Type == chalType || p == nil) {
			p = ch.Error
		}
	}
	perm, ok := err.(permanentError)
	if p == nil || !ok {
		return err
	}
	return permanentError{withCause{perm.err, nameProblem{name: authz.IdentifierValue(), Problem: *p}}}
}

// problemText renders an upstream problem for an operator.
func problemText(p *acme.Problem) string {
	if p == nil {
		return "no reason given"
	}
	return p.Error()
}

// problemErr is an upstream order's error as an error that classify
// reads the client's refusal from (refusalOf), as from a problem the
// upstream answered with; its text is problemText's.
func problemErr(p *acme.Problem) error {
	if p == nil {
		return errors.New(problemText(p))
	}
	return *p
}

// challengeProblems collects the errors the upstream recorded on an
// authorization's challenges.
func challengeProblems(authz acme.Authorization) string {
	var out []string
	for _, ch := range authz.Challenges {
		if ch.Error != nil {
			out = append(out, ch.Type+": "+ch.Error.Error())
		}
	}
	if len(out) == 0 {
		return "no reason given"
	}
	return strings.Join(out, "; ")
}

// ---- the upstream account ----

// accountRecord is the upstream account as earlier versions kept it in
// Caddy storage: the key, and where the upstream registered it.
type accountRecord struct {
	KeyPEM   string   `json:"key_pem"`
	Location string   `json:"location,omitempty"`
	Contact  []string `json:"contact,omitempty"`
}

// accountKey is the storage key where earlier versions kept a profile's
// upstream account.
func (s *Signer) accountKey(profile string) string {
	return path.Join("acme_proxy", "relay", certmagic.StorageKeys.Safe(s.issuerKey), certmagic.StorageKeys.Safe(profile), "account.json")
}

// account returns the profile's registered upstream account: from memory,
// else from the store, else a new key registered now. The store is shared
// by every instance on the database: an instance continues the upstream
// orders another placed, with the same account. The key is stored before
// it is registered, and a second instance creating one at the same time
// gets the first key back (store.CreateRelayAccount), so every instance
// uses one key; registering it again is harmless (RFC 8555 §7.3.1: the
// upstream answers with the existing account). An account that an earlier
// version kept in Caddy storage is moved into the store on first use.
func (s *Signer) account(ctx context.Context, c *acme.Client, profile string) (acme.Account, error) {
	s.acctMu.Lock()
	defer s.acctMu.Unlock()
	if s.acct != nil {
		return *s.acct, nil
	}
	db, err := s.sharedStore()
	if err != nil {
		return acme.Account{}, err
	}
	rec, err := db.GetRelayAccount(ctx, s.issuerKey, profile)
	if errors.Is(err, store.ErrNotFound) {
		rec, err = s.createAccount(ctx, db, profile)
	}
	if err != nil {
		return acme.Account{}, err
	}
	priv, err := parseKey(rec.KeyPEM)
	if err != nil {
		return acme.Account{}, permanent("the upstream account key of profile %s: %w", profile, err)
	}
	acct := acme.Account{Location: rec.Location, PrivateKey: priv, Contact: rec.Contact}
	if acct.Location == "" {
		acct.TermsOfServiceAgreed = true
		if s.opts.Email != "" {
			acct.Contact = []string{"mailto:" + s.opts.Email}
		}
		if s.opts.EAB != nil {
			if err := acct.SetExternalAccountBinding(ctx, c, *s.opts.EAB); err != nil {
				return acme.Account{}, fmt.Errorf("binding the upstream account: %w", err)
			}
		}
		acct, err = c.NewAccount(ctx, acct)
		if err != nil {
			return acme.Account{}, fmt.Errorf("registering the upstream account: %w", err)
		}
		if err := urlProblem("account", acct.Location); err != nil {
			return acme.Account{}, fmt.Errorf("registering the upstream account: %w", err)
		}
		if err := db.SetRelayAccountRegistration(ctx, s.issuerKey, profile, acct.Location, acct.Contact, s.clock.Now()); err != nil {
			return acme.Account{}, err
		}
		s.bound.Logger().Info("upstream account registered", zap.String("event", "relay_account_registered"),
			zap.String("profile", profile), zap.String("directory", s.secrets.directory), zap.String("account", s.secrets.text(acct.Location)))
	}
	acct.PrivateKey = priv
	s.acct = &acct
	return acct, nil
}

// createAccount stores the profile's first upstream account: the one an
// earlier version kept in Caddy storage, else a new key. It returns the
// account the store holds afterwards, which is another instance's when
// that one was first.
func (s *Signer) createAccount(ctx context.Context, db *store.DB, profile string) (store.RelayAccount, error) {
	rec := store.RelayAccount{Upstream: s.issuerKey, Profile: profile}
	raw, err := s.opts.Storage.Load(ctx, s.accountKey(profile))
	legacy := err == nil
	switch {
	case err == nil:
		var old accountRecord
		if err := json.Unmarshal(raw, &old); err != nil {
			return store.RelayAccount{}, permanent("the upstream account in storage at %s does not parse: %w", s.accountKey(profile), err)
		}
		rec.KeyPEM, rec.Location, rec.Contact = old.KeyPEM, old.Location, old.Contact
	case errors.Is(err, fs.ErrNotExist):
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return store.RelayAccount{}, permanent("generating the upstream account key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return store.RelayAccount{}, permanent("encoding the upstream account key: %w", err)
		}
		rec.KeyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	default:
		return store.RelayAccount{}, fmt.Errorf("loading the upstream account from storage: %w", err)
	}
	got, err := db.CreateRelayAccount(ctx, rec, s.clock.Now())
	if err == nil && legacy && got.KeyPEM == rec.KeyPEM {
		// Moved, not copied: the store holds the key now, and a second
		// copy in Caddy storage (shared, backed up, kept as its backend
		// keeps things) would outlive its use.
		if err := s.opts.Storage.Delete(ctx, s.accountKey(profile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.bound.Logger().Warn("the upstream account moved into the store is still in Caddy storage; delete it there",
				zap.String("event", "relay_account_move_incomplete"), zap.String("profile", profile),
				zap.String("storage_key", s.accountKey(profile)), zap.Error(err))
		}
	}
	return got, err
}

// forgetAccount drops the registration (not the key): the upstream said
// it does not know the account, so the next attempt registers it again.
func (s *Signer) forgetAccount(ctx context.Context, profile string) {
	s.acctMu.Lock()
	defer s.acctMu.Unlock()
	s.acct = nil
	db, err := s.sharedStore()
	if err == nil {
		err = db.SetRelayAccountRegistration(ctx, s.issuerKey, profile, "", nil, s.clock.Now())
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.bound.Logger().Error("forgetting the upstream account", zap.String("event", "relay_account_forget_failed"), zap.Error(err))
	}
}

func parseKey(keyPEM string) (crypto.Signer, error) {
	block, _ := pem.Decode([]byte(keyPEM))
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	sk, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return sk, nil
}

// ofAnotherUpstream reports whether an upstream order whose read by
// this upstream's account failed (readErr) is at another origin than the
// upstream's own newOrder: then it was placed (or prepared) at an
// upstream a reload has since replaced (one down, or left), which the new
// upstream's account cannot read and which may not answer at all; it is
// placed again here, the old upstream's left to expire there. An order
// read without error is the upstream's wherever it lives (an upstream may
// keep its orders at another origin than its newOrder): such an
// upstream's order is placed again only after a read of it failed.
// Without the directory (acmez's copy, read for the account already), or
// once ctx has ended, nothing is judged: the read's error is returned as
// before.
func ofAnotherUpstream(ctx context.Context, c *acme.Client, orderURL string, readErr error) bool {
	if readErr == nil || ctx.Err() != nil {
		return false
	}
	dir, err := c.GetDirectory(ctx)
	if err != nil {
		return false
	}
	return !sameOrigin(orderURL, dir.NewOrder)
}

// sameOrigin reports whether two URLs have one scheme and host (a port
// the scheme implies written or not): an upstream's orders are where its
// newOrder is. A URL that does not parse is taken as the same, to be
// asked as before.
func sameOrigin(a, b string) bool {
	ua, err := url.Parse(a)
	if err != nil {
		return true
	}
	ub, err := url.Parse(b)
	if err != nil {
		return true
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(hostPort(ua), hostPort(ub))
}

// hostPort is u's host and port, the scheme's default port when it names
// none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "443"
	if strings.EqualFold(u.Scheme, "http") {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
