package authority

import (
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Metrics receives the server's measurements. Label values passed are
// bounded (profile and route names, status codes, challenge types, reason
// classes): never identifiers, serials or addresses. Implementations must
// be safe for concurrent use.
type Metrics interface {
	// Request counts one ACME request by route name (e.g. "new-order",
	// "order/finalize") and status code, and observes its duration.
	Request(profile, route string, status int, d time.Duration)
	// Issued counts a certificate issued.
	Issued(profile string)
	// IssueFailed counts an issuance that failed for good, its order
	// made invalid, once per order, by reason class (bad_csr,
	// rejected_identifier, bad_validity, abandoned, invalid_profile
	// for an order whose certificate profile a reload removed before it
	// was signed, and caa for one whose CAA records, checked again
	// before a deferred signing, forbid it).
	IssueFailed(profile, reason string)
	// IssueDeferred counts a finalize whose signing was put off by a
	// fault on our side (the signer unavailable, the leaf's CRL not yet
	// publishable): the order stays processing and is signed later, so
	// it is no failed issuance. By reason class (signer_unavailable,
	// internal, crl_unpublished).
	IssueDeferred(profile, reason string)
	// Revoked counts a revocation recorded.
	Revoked(profile string)
	// Validated counts a challenge validation by type and outcome
	// (valid, invalid).
	Validated(profile, challenge, outcome string)
	// RevocationRefused counts a refused revoke-cert by reason kind
	// (malformed, unknown_certificate, not_authorized, already_revoked,
	// bad_reason), audited on its own row or not.
	RevocationRefused(profile, reason string)
}

// NopMetrics measures nothing: the default.
type NopMetrics struct{}

func (NopMetrics) Request(string, string, int, time.Duration) {}
func (NopMetrics) Issued(string)                              {}
func (NopMetrics) IssueFailed(string, string)                 {}
func (NopMetrics) IssueDeferred(string, string)               {}
func (NopMetrics) Revoked(string)                             {}
func (NopMetrics) Validated(string, string, string)           {}
func (NopMetrics) RevocationRefused(string, string)           {}

// notifyJobs are the notify_deliver jobs ev owes this profile's
// destinations; nil when none wants it. The caller stores them in the
// transaction that records the event, then calls notified.
func (au *Authority) notifyJobs(ev notify.Event) []store.NewJob {
	if len(au.notify) == 0 {
		return nil
	}
	if ev.Profile == "" {
		ev.Profile = au.cfg.Profile
	}
	if ev.Time.IsZero() {
		ev.Time = au.clock.Now()
	}
	return notify.Jobs(au.notify, ev)
}

// Notified wakes the runner for jobs a committed write stored.
func (au *Authority) Notified(jobs []store.NewJob) {
	if len(jobs) > 0 {
		au.queue.Wake(notify.Kind)
	}
}

// AuditNotifyJobs are the notify_deliver jobs of an audit row.
func (au *Authority) AuditNotifyJobs(ev store.AuditEvent) []store.NewJob {
	if len(au.notify) == 0 {
		return nil
	}
	ev = ev.Bounded() // the notification carries what the row stores
	return au.notifyJobs(notify.Event{
		Event: ev.Event, Profile: ev.Profile, Order: ev.OrderID, Account: ev.AccountID,
		Identifiers: ev.Identifiers, Serial: ev.Serial, Reason: ev.Reason, Detail: ev.Detail,
		ClientAddress: ev.ClientIP, Time: ev.At,
	})
}
