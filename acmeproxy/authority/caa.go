package authority

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// CAAChecker checks a DNS identifier's CAA records (RFC 8659, RFC 8657)
// before the profile issues for it: domain is the name without the "*."
// of a wildcard (which wildcard says), accountID the requesting account,
// method the challenge type that proved control. It answers like a
// Validator: nil (permitted), a *problem.Problem (refused by the records,
// or a DNS failure that hides them), any other error for a fault on our
// side.
type CAAChecker interface {
	CheckCAA(ctx context.Context, domain string, wildcard bool, accountID, method string) error
}

// CAAReusePeriod is how long a CAA check may stand before a signature
// (the CA/Browser Forum's Baseline Requirements §3.2.2.8: 8 hours).
const CAAReusePeriod = 8 * time.Hour

// CAARecheckAfter is how old an authorization's validation may be at
// finalize, or before a signing put off after it, before its CAA records
// are checked again: an hour short of CAAReusePeriod (as Boulder's 7
// hours), because the validation's stamp is not the age of its check.
// The lookup ran before the stamp, the stamp may come from another
// instance of the fleet whose clock runs ahead of this one's, and the
// signature comes after the decision; with no margin, a signature could
// rest on a check just over 8 hours old.
const CAARecheckAfter = CAAReusePeriod - time.Hour

// checkCAA checks the CAA records of the identifier of a, whose
// challenge of type method has just been met; nil when the profile checks
// no CAA, for an IP address (RFC 8738 §7: CAA does not apply), and when
// the records permit.
func (au *Authority) checkCAA(ctx context.Context, a store.Authz, method string) error {
	if au.caa == nil || a.Identifier.Type != acme.IdentifierDNS {
		return nil
	}
	return au.caa.CheckCAA(ctx, a.Identifier.Value, a.Wildcard, a.AccountID, method)
}

// caaRecheckParallel is how many of an order's CAA lookups caaRecheck
// runs at once.
const caaRecheckParallel = 16

// caaRecheck checks again, at finalize, the CAA records of each of the
// order's authorizations validated more than CAARecheckAfter ago. It
// returns nil, the problem refusing the order (a subproblem per refused
// identifier; 403 for records that forbid, 400 for a lookup that failed),
// or a fault.
//
// Each refused identifier is a finalize_refused audit row of the order's
// account from cl, with the problem type as its reason and its detail,
// which names where the records were found and quotes them (their
// issuers; DNS data, no secret).
func (au *Authority) caaRecheck(ctx context.Context, o store.Order, cl Client) error {
	subs, err := au.staleCAA(ctx, o)
	if err != nil || len(subs) == 0 {
		return err
	}
	evs := make([]store.AuditEvent, 0, len(subs))
	for _, p := range subs {
		value := p.Identifier.Value
		au.log.Info("finalize refused by CAA", zap.String("event", "finalize_caa_refused"), zap.String("profile", au.cfg.Profile),
			zap.String("order", o.ID), zap.String("identifier", value), zap.String("problem", p.Detail))
		ev := au.event(ctx, acme.EventFinalizeRefused, OutcomeRefused, Actor{Kind: ActorAccount, ID: o.AccountID}, cl)
		ev.OrderID, ev.AccountID, ev.Reason, ev.Detail = o.ID, o.AccountID, string(p.Type), p.Detail
		ev.Identifiers = []acme.Identifier{*p.Identifier}
		// The order stays ready, and a client may finalize it again
		// and again: the same refusal of an identifier of an order is
		// one row, so the trail does not grow with the client's retries.
		sum := sha256.Sum256([]byte(string(p.Type) + "\n" + p.Detail))
		ev.DedupKey = acme.EventFinalizeRefused + ":" + o.ID + ":" + value + ":" + hex.EncodeToString(sum[:8])
		evs = append(evs, ev)
	}
	if err := au.db.InsertAudits(context.WithoutCancel(ctx), evs); err != nil {
		// The refusal stands without its rows (see audit).
		au.log.Error("writing an audit row", zap.String("event", "audit_write_failed"),
			zap.String("audit_event", acme.EventFinalizeRefused), zap.String("order", o.ID), zap.Error(err))
	}
	return caaRefusal(subs)
}

// caaRecheckStored checks again, before a processing order is signed
// later than its finalize (resumed, or delegated to a worker), the CAA
// records of each of its authorizations validated more than
// CAARecheckAfter ago: the check made at validation, or at finalize, is
// not relied on for longer. It returns nil; the problem of records that
// forbid (a subproblem per refused identifier, those first); or, when
// the only refusals are lookups that failed, a fault: the records are
// unknown, the order waits and is tried again.
func (au *Authority) caaRecheckStored(ctx context.Context, o store.Order) (*problem.Problem, error) {
	if au.caa == nil {
		return nil, nil
	}
	if len(o.AuthzIDs) == 0 {
		// Read without its authorizations (the resume sweep's orders).
		full, err := au.db.GetOrder(ctx, au.cfg.Profile, o.ID)
		if err != nil {
			return nil, err
		}
		o.AuthzIDs = full.AuthzIDs
	}
	subs, err := au.staleCAA(ctx, o)
	if err != nil || len(subs) == 0 {
		return nil, err
	}
	slices.SortStableFunc(subs, func(a, b *problem.Problem) int {
		return cmp.Compare(caaRank(a), caaRank(b))
	})
	if subs[0].Type != acme.ErrorCAA {
		return nil, fmt.Errorf("re-checking CAA of %s before signing: %s", subs[0].Identifier.Value, subs[0].Detail)
	}
	return caaRefusal(subs), nil
}

// caaRank puts the records that forbid before the lookups that failed.
func caaRank(p *problem.Problem) int {
	if p.Type == acme.ErrorCAA {
		return 0
	}
	return 1
}

// staleCAA checks again the CAA records of each of the order's
// authorizations validated more than CAARecheckAfter ago. It returns a
// problem per refused identifier (For it), or a fault.
func (au *Authority) staleCAA(ctx context.Context, o store.Order) ([]*problem.Problem, error) {
	if au.caa == nil {
		return nil, nil
	}
	now := au.clock.Now()
	type stale struct {
		a      store.Authz
		method string
	}
	var todo []stale
	for _, id := range o.AuthzIDs {
		a, err := au.db.GetAuthz(ctx, au.cfg.Profile, id)
		if err != nil {
			return nil, err
		}
		var valid *store.Challenge
		for i := range a.Challenges {
			if a.Challenges[i].Status == acme.StatusValid {
				valid = &a.Challenges[i]
			}
		}
		if valid == nil || now.Sub(valid.Validated) <= CAARecheckAfter {
			continue // not ours to judge here (a ready order's are all valid), or fresh
		}
		todo = append(todo, stale{a, valid.Type})
	}
	// The lookups run side by side, caaRecheckParallel at a time: one
	// after another, an order of a few names behind slow DNS would outlast
	// its request's deadline on every finalize.
	results := make([]error, len(todo))
	var wg sync.WaitGroup
	turns := make(chan struct{}, caaRecheckParallel)
	for i, st := range todo {
		wg.Go(func() {
			turns <- struct{}{}
			defer func() { <-turns }()
			results[i] = au.checkCAA(ctx, st.a, st.method)
		})
	}
	wg.Wait()
	var subs []*problem.Problem
	for i, st := range todo {
		a, err := st.a, results[i]
		if err == nil {
			continue
		}
		p, ok := problem.As(err)
		if !ok {
			return nil, fmt.Errorf("re-checking CAA of %s: %w", a.Identifier.Value, err)
		}
		value := a.Identifier.Value
		if a.Wildcard {
			value = "*." + value
		}
		subs = append(subs, p.For(a.Identifier.Type, value))
	}
	return subs, nil
}

// caaRefusal is the problem of CAA records refusing an order, over its
// subproblems (one per refused identifier; at least one): 403 for records
// that forbid, 400 for a lookup that failed.
func caaRefusal(subs []*problem.Problem) *problem.Problem {
	return problem.IdentifiersRefused(subs, fmt.Sprintf("the CAA records of %d identifiers, checked again since their validation is older than %s, refuse issuance (see the subproblems)",
		len(subs), CAARecheckAfter))
}
