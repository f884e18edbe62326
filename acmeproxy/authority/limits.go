package authority

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The limits of a profile, by the names the config and the problem
// details use.
const (
	LimitAccountsPerIP         = "accounts_per_ip"        // new accounts per client address (IPv6 per /64)
	LimitOrdersPerAccount      = "orders_per_account"     // new orders per account
	LimitPendingAuthorizations = "pending_authorizations" // a cap on an account's pending authorizations
	LimitFailedValidations     = "failed_validations"     // failed validations per account and identifier
	LimitDuplicateCertificates = "duplicate_certificates" // certificates per account for one exact identifier set
	LimitMaxIdentifiers        = "max_identifiers"        // identifiers per order
)

// LimitNames are the limits, in the order a request is checked against
// them.
var LimitNames = []string{LimitAccountsPerIP, LimitOrdersPerAccount, LimitPendingAuthorizations,
	LimitFailedValidations, LimitDuplicateCertificates, LimitMaxIdentifiers}

// IsCapLimit reports whether a limit is a count with no period (a cap)
// rather than a rate.
func IsCapLimit(name string) bool {
	return name == LimitPendingAuthorizations || name == LimitMaxIdentifiers
}

// Rate is one limit: Count per Period for a rate, Count alone for a cap.
// A Count of 0 is off.
type Rate struct {
	Count  int
	Period time.Duration
}

// Off reports whether the limit is disabled.
func (r Rate) Off() bool { return r.Count <= 0 }

func (r Rate) String() string {
	if r.Off() {
		return "off"
	}
	if r.Period == 0 {
		return fmt.Sprint(r.Count)
	}
	return fmt.Sprintf("%d per %s", r.Count, days(r.Period))
}

// Limits are a profile's limits, checked and defaulted by the caller. The
// zero value limits nothing.
type Limits struct {
	AccountsPerIP         Rate
	OrdersPerAccount      Rate
	PendingAuthorizations Rate // a cap: Period is 0
	FailedValidations     Rate
	DuplicateCertificates Rate
	MaxIdentifiers        Rate // a cap: Period is 0
	// Overrides replace a limit for one account, or for the accounts
	// bound with an EAB key of one label; an account's own override
	// wins over its label's.
	Overrides []LimitOverride
}

// LimitOverride replaces one limit for the account Account, or for every
// account bound with an EAB key labelled EABLabel (exactly one is set).
type LimitOverride struct {
	Account  string
	EABLabel string
	Limit    string
	Rate     Rate
}

// DefaultLimits are the limits of a profile that configures none: generous
// for an internal fleet (an operator's thousand machines renewing on
// schedule never meet them), tight enough that one runaway client cannot
// grow the database without bound.
func DefaultLimits() Limits {
	return Limits{
		AccountsPerIP:         Rate{Count: 100, Period: time.Hour},
		OrdersPerAccount:      Rate{Count: 1000, Period: time.Hour},
		PendingAuthorizations: Rate{Count: 1000},
		FailedValidations:     Rate{Count: 60, Period: time.Hour},
		DuplicateCertificates: Rate{Count: 300, Period: 24 * time.Hour},
		MaxIdentifiers:        Rate{Count: 100},
	}
}

// Limit is the profile's setting of one limit, by name.
func (l Limits) Limit(name string) Rate {
	switch name {
	case LimitAccountsPerIP:
		return l.AccountsPerIP
	case LimitOrdersPerAccount:
		return l.OrdersPerAccount
	case LimitPendingAuthorizations:
		return l.PendingAuthorizations
	case LimitFailedValidations:
		return l.FailedValidations
	case LimitDuplicateCertificates:
		return l.DuplicateCertificates
	case LimitMaxIdentifiers:
		return l.MaxIdentifiers
	}
	return Rate{}
}

// For is the limit name as it applies to the account accountID (""
// before it exists) bound with an EAB key labelled eabLabel ("" for none).
func (l Limits) For(name, accountID, eabLabel string) Rate {
	byLabel, found := Rate{}, false
	for _, o := range l.Overrides {
		switch {
		case o.Limit != name:
		case o.Account != "" && o.Account == accountID:
			return o.Rate
		case o.EABLabel != "" && o.EABLabel == eabLabel && !found:
			byLabel, found = o.Rate, true
		}
	}
	if found {
		return byLabel
	}
	return l.Limit(name)
}

// limitAuditInterval spaces the audit rows of one limit refusing one
// subject: a client retrying in a loop writes one row an interval, not
// one per request.
const limitAuditInterval = time.Hour

// limitKey names a bucket: the limit, the profile and the subject. The
// keys of a new-order's buckets (one or two parts of subject) are built
// in one allocation each.
func (au *Authority) limitKey(name string, subject ...string) string {
	switch len(subject) {
	case 1:
		return name + "/" + au.cfg.Profile + "/" + subject[0]
	case 2:
		return name + "/" + au.cfg.Profile + "/" + subject[0] + "/" + subject[1]
	}
	return name + "/" + au.cfg.Profile + "/" + strings.Join(subject, "/")
}

// bucket is the store's spend of one unit from limit name's bucket for
// subject, at rate r (a rate, not off).
func (au *Authority) bucket(name string, r Rate, subject ...string) store.LimitSpend {
	return store.LimitSpend{Key: au.limitKey(name, subject...), Emission: r.Period / time.Duration(r.Count),
		Burst: int64(r.Count), Cost: 1}
}

// limited is one spend of a request and the limit it belongs to.
type limited struct {
	name  string
	rate  Rate
	spend store.LimitSpend
	what  string // the subject, for the detail: "this account", "10.0.0.0/8"
	// validationOf, for a failed_validations check, is the identifier
	// whose validations it counts: the detail's subject is built from it
	// only for a refusal.
	validationOf string
}

// subject is l's subject, for the detail of a refusal.
func (l limited) subject() string {
	if l.validationOf != "" {
		return "this account's validation of " + l.validationOf
	}
	return l.what
}

// deniedBy refuses a request whose spends ls the store decided as out,
// by the denied limit that holds it longest: rateLimited naming that
// limit, with its wait as the Retry-After, counted, and audited (once per
// limit and subject an interval). A request over several limits is told
// the longest wait, as Boulder's BatchSpend answers its strictest
// decision, so that a client waiting what it is told is not refused again
// by a limit the answer left out; of equal waits, the first limit.
func (au *Authority) deniedBy(ctx context.Context, ls []limited, out []store.LimitDecision, acct string, cl Client) error {
	at, longest := -1, time.Duration(0)
	for i, d := range out {
		if d.Allowed || i >= len(ls) {
			continue
		}
		wait := d.RetryAfter
		if ls[i].spend.PendingAuthzs && wait <= 0 {
			wait = OrderLifetime
		}
		if at < 0 || wait > longest {
			at, longest = i, wait
		}
	}
	if at < 0 {
		return errors.New("authority: the store denied a rate limit spend without a denied bucket")
	}
	l, d := ls[at], out[at]
	if l.spend.PendingAuthzs {
		return au.refuseLimited(ctx, l.name, acct, cl,
			problem.RateLimitedF(longest, "%s: this account has %d pending authorizations and this order would add %d, over this server's cap of %d; finish or deactivate some, or retry when enough of them have expired",
				l.name, d.Held, l.spend.Cost, l.rate.Count))
	}
	// The detail's wait is the header's: whole seconds, rounded up.
	wait := time.Duration(problem.RetryAfterSeconds(longest)) * time.Second
	return au.refuseLimited(ctx, l.name, acct, cl, problem.RateLimitedF(longest,
		"%s: %s is over this server's limit of %s; retry after %s", l.name, l.subject(), l.rate, wait))
}

// refuseLimited counts and audits a refusal by limit name of the account
// acct ("" before it exists: the client's address then) and returns p.
// One audit row per limit and account (or address) an interval, however
// many of its buckets the limit has (failed_validations one per
// identifier, duplicate_certificates one per identifier set): the audit's
// own bucket, in the store, so instances sharing it share the spacing too.
func (au *Authority) refuseLimited(ctx context.Context, name, acct string, cl Client, p *problem.Problem) error {
	if m, ok := au.metrics.(LimitMetrics); ok {
		m.RateLimited(au.cfg.Profile, name)
	}
	who := acct
	if who == "" {
		who = refusalSource(cl.IP)
	}
	gate := store.LimitSpend{Key: "audit/" + au.limitKey(name, who), Emission: limitAuditInterval, Burst: 1, Cost: 1}
	_, first, err := au.db.SpendLimits(context.WithoutCancel(ctx), []store.LimitSpend{gate}, au.clock.Now())
	if err != nil {
		au.log.Warn("spacing rate limit audit rows", zap.String("event", "rate_limit_audit_failed"), zap.Error(err))
		return p
	}
	if !first {
		return p
	}
	actor := Actor{Kind: ActorAccount, ID: acct}
	if acct == "" {
		actor = Actor{Kind: ActorAccountKey}
	}
	ev := au.event(ctx, acme.EventRateLimited, OutcomeRefused, actor, cl)
	ev.AccountID, ev.Reason = acct, name
	ev.Detail = store.Clip(p.Detail+fmt.Sprintf(" (further refusals by this limit for this subject are not audited for %s)", limitAuditInterval), store.AuditDetailMax)
	au.audit(ctx, ev)
	au.log.Info("rate limited", zap.String("event", acme.EventRateLimited), zap.String("profile", au.cfg.Profile),
		zap.String("limit", name), zap.String("account", acct))
	return p
}

// LimitMetrics is the measurement of limits, for a Metrics that takes it.
type LimitMetrics interface {
	// RateLimited counts a request refused by one of the profile's
	// limits, by limit name.
	RateLimited(profile, limit string)
}

// accountLimits are what a new account costs: a unit of accounts_per_ip
// for the client's address; eabLabel is the label of the key it binds,
// for an override. The account's write spends them (CreateAccount).
func (au *Authority) accountLimits(cl Client, eabLabel string) []limited {
	r := au.cfg.Limits.For(LimitAccountsPerIP, "", eabLabel)
	if r.Off() || cl.IP == "" {
		return nil
	}
	src := refusalSource(cl.IP)
	subject := []string{src}
	if au.cfg.Limits.labelOverride(LimitAccountsPerIP, eabLabel) {
		// The label's registrations from the address have a bucket of
		// their own, at the label's rate.
		subject = append(subject, "eab:"+eabLabel)
	}
	return []limited{{name: LimitAccountsPerIP, rate: r, spend: au.bucket(LimitAccountsPerIP, r, subject...), what: src}}
}

// MaxIdentifiers is how many identifiers one order of acct may have; 0
// for no bound.
func (au *Authority) MaxIdentifiers(acct store.Account) int {
	return au.cfg.Limits.For(LimitMaxIdentifiers, acct.ID, acct.EABLabel).Count
}

// TooManyIdentifiers is the refusal of an order with n identifiers over
// the max_identifiers limit of acct. It is not rateLimited: no wait makes
// such an order fit.
func (au *Authority) TooManyIdentifiers(acct store.Account, n int) *problem.Problem {
	return problem.RejectedIdentifierF("%s: an order may have at most %d identifiers, not %d", LimitMaxIdentifiers, au.MaxIdentifiers(acct), n)
}

// OrderLimits are what a new order costs in the profile's limits, spent
// by CreateOrder in the order's own write.
type OrderLimits struct {
	acct string
	cl   Client
	ls   []limited
}

// OrderLimits returns what a new order of acct for idents (normalized, as
// CreateOrder takes them) will spend when CreateOrder stores it: its
// authorizations under the pending_authorizations cap and a unit of
// orders_per_account, and what it only checks: the duplicate_certificates
// bucket of its exact identifier set (spent when a certificate is issued,
// see issuanceSpends) and each identifier's failed_validations bucket.
// The spend and the order are one store write: over any limit the request
// is refused with rateLimited and nothing is written, and an order that
// fails to be stored spends nothing.
//
// renewalInARIWindow exempts the order from orders_per_account and
// duplicate_certificates' check: it is a renewal whose "replaces" (RFC 9773 §5)
// names a certificate of this account inside its ARI renewal window — a
// renewal the server itself asked for must never be refused. The caller
// decides it; until the HTTP front reads "replaces", it passes false.
func (au *Authority) OrderLimits(ctx context.Context, acct store.Account, idents []acme.Identifier, wildcards []bool, renewalInARIWindow bool, cl Client) (*OrderLimits, error) {
	lim := func(name string) Rate { return au.cfg.Limits.For(name, acct.ID, acct.EABLabel) }
	ls := make([]limited, 0, 3+len(idents))
	if r := lim(LimitPendingAuthorizations); !r.Off() {
		if len(idents) > r.Count {
			// An authorization an identifier; no wait makes such an
			// order fit the cap, so it is not rateLimited.
			return nil, problem.RejectedIdentifierF("%s: this account may hold at most %d pending authorizations, so an order may have at most %d identifiers, not %d",
				LimitPendingAuthorizations, r.Count, r.Count, len(idents))
		}
		// Decided by CreateOrder in the order's write, against a bound
		// it keeps of the account's pending authorizations (see
		// store.LimitSpend.PendingAuthzs).
		ls = append(ls, limited{name: LimitPendingAuthorizations, rate: r, spend: store.LimitSpend{Key: au.limitKey(LimitPendingAuthorizations, acct.ID),
			Burst: int64(r.Count), Cost: int64(len(idents)), PendingAuthzs: true}, what: "this account"})
	}
	if r := lim(LimitOrdersPerAccount); !r.Off() && !renewalInARIWindow {
		ls = append(ls, limited{name: LimitOrdersPerAccount, rate: r, spend: au.bucket(LimitOrdersPerAccount, r, acct.ID), what: "this account"})
	}
	if r := lim(LimitFailedValidations); !r.Off() {
		for i, id := range idents {
			value := id.Value
			if i < len(wildcards) && wildcards[i] {
				value = strings.TrimPrefix(value, "*.")
			}
			b := au.bucket(LimitFailedValidations, r, acct.ID, id.Type+":"+value)
			b.CheckOnly = true
			ls = append(ls, limited{name: LimitFailedValidations, rate: r, spend: b, validationOf: value})
		}
	}
	if r := lim(LimitDuplicateCertificates); !r.Off() && !renewalInARIWindow {
		// Only checked: a unit is taken when a certificate is issued, so
		// an order that never gets one does not count.
		b := au.bucket(LimitDuplicateCertificates, r, acct.ID, identifierSetKey(idents))
		b.CheckOnly = true
		ls = append(ls, limited{name: LimitDuplicateCertificates, rate: r, spend: b,
			what: "this account's count of certificates for exactly these identifiers"})
	}
	return &OrderLimits{acct: acct.ID, cl: cl, ls: ls}, nil
}

// spends are the store's spends of l; none for nil.
func (l *OrderLimits) spends() []store.LimitSpend {
	if l == nil {
		return nil
	}
	return spendsOf(l.ls)
}

// spendsOf are the store's spends of ls.
func spendsOf(ls []limited) []store.LimitSpend {
	out := make([]store.LimitSpend, len(ls))
	for i, x := range ls {
		out[i] = x.spend
	}
	return out
}

// refusal is the answer to a write the store refused for l's spends
// (err a *store.LimitError), and nil for any other error.
func (au *Authority) limitRefusal(ctx context.Context, l *OrderLimits, err error) error {
	le, ok := errors.AsType[*store.LimitError](err)
	if !ok || l == nil {
		return nil
	}
	return au.deniedBy(ctx, l.ls, le.Decisions, l.acct, l.cl)
}

// identifierSetKey names an exact identifier set, whatever its order:
// a hash of the sorted identifiers, so a bucket key stays short.
func identifierSetKey(idents []acme.Identifier) string {
	if len(idents) == 1 {
		// The same hash as below, without the slice to sort.
		h := sha256.Sum256([]byte(idents[0].Type + ":" + strings.ToLower(idents[0].Value)))
		return hex.EncodeToString(h[:16])
	}
	s := make([]string, len(idents))
	for i, id := range idents {
		s[i] = id.Type + ":" + strings.ToLower(id.Value)
	}
	slices.Sort(s)
	s = slices.Compact(s)
	h := sha256.Sum256([]byte(strings.Join(s, "\n")))
	return hex.EncodeToString(h[:16])
}

// issuanceSpends are what the certificate of order o counts in the
// profile's limits, spent by the issuance's own write (store.IssueOrder):
// a unit of duplicate_certificates for the order's exact identifier set,
// as Boulder spends CertificatesPerFQDNSet when it issues. A renewal
// inside its ARI window, exempt from the check at new-order, counts all
// the same: it is a certificate. A spend that does not fit is dropped by
// the store; a certificate signed already is never refused.
func (au *Authority) issuanceSpends(ctx context.Context, o store.Order) []store.LimitSpend {
	label := ""
	if au.cfg.Limits.hasLabelOverride(LimitDuplicateCertificates) {
		if acct, err := au.db.GetAccount(ctx, au.cfg.Profile, o.AccountID); err == nil {
			label = acct.EABLabel
		}
	}
	r := au.cfg.Limits.For(LimitDuplicateCertificates, o.AccountID, label)
	if r.Off() || r.Period < time.Duration(r.Count) {
		// Off, or no interval to spend by (a config never has one).
		return nil
	}
	return []store.LimitSpend{au.bucket(LimitDuplicateCertificates, r, o.AccountID, identifierSetKey(o.Identifiers))}
}

// spendFailedValidation takes a unit of failed_validations from the bucket
// of the account and identifier whose validation failed. It is checked at
// the next new-order naming the identifier; a failure to spend is logged.
func (au *Authority) spendFailedValidation(ctx context.Context, a store.Authz) {
	label := ""
	if au.cfg.Limits.hasLabelOverride(LimitFailedValidations) {
		if acct, err := au.db.GetAccount(ctx, au.cfg.Profile, a.AccountID); err == nil {
			label = acct.EABLabel
		}
	}
	r := au.cfg.Limits.For(LimitFailedValidations, a.AccountID, label)
	if r.Off() {
		return
	}
	b := au.bucket(LimitFailedValidations, r, a.AccountID, a.Identifier.Type+":"+a.Identifier.Value)
	// When the bucket is empty already the spend is denied and changes
	// nothing: the next order sees it empty either way.
	if _, _, err := au.db.SpendLimits(context.WithoutCancel(ctx), []store.LimitSpend{b}, au.clock.Now()); err != nil {
		au.log.Warn("spending a failed validation", zap.String("event", "rate_limit_spend_failed"),
			zap.String("profile", au.cfg.Profile), zap.Error(err))
	}
}

func (l Limits) hasLabelOverride(name string) bool {
	for _, o := range l.Overrides {
		if o.Limit == name && o.EABLabel != "" {
			return true
		}
	}
	return false
}

// labelOverride reports whether an override of limit name for the EAB
// label exists.
func (l Limits) labelOverride(name, label string) bool {
	for _, o := range l.Overrides {
		if o.Limit == name && label != "" && o.EABLabel == label {
			return true
		}
	}
	return false
}
