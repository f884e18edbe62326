package authority

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
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
	// made invalid, once per order, by reason class: failureClass's
	// (bad_csr, rejected_identifier, bad_validity, rate_limited, caa,
	// dns, connection, compound, internal), abandoned, and
	// invalid_profile for an order whose certificate profile a reload
	// removed before it was signed. The README's metrics list is the
	// operator's copy.
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
	return au.notifyJobs(auditNotifyEvent(ev))
}

// auditNotifyEvent is the notification of an audit row, carrying what
// the row stores.
func auditNotifyEvent(ev store.AuditEvent) notify.Event {
	ev = ev.Bounded()
	return notify.Event{
		Event: ev.Event, Profile: ev.Profile, Order: ev.OrderID, Account: ev.AccountID,
		Identifiers: ev.Identifiers, Serial: ev.Serial, Reason: ev.Reason, Detail: ev.Detail,
		ClientAddress: ev.ClientIP, Time: ev.At,
	}
}

// NotifyRouteKind is the kind of the job that carries an event of a
// profile not mounted where it happened (an operator deactivating an
// account through an instance whose config lacks the account's profile)
// to an instance that mounts it: only there are the profile's
// notification destinations known, and there the job becomes their
// notify_deliver jobs.
const NotifyRouteKind = "notify_route"

type notifyRoutePayload struct {
	Profile string       `json:"profile"`
	Event   notify.Event `json:"event"`
}

func (p notifyRoutePayload) profileName() string { return p.Profile }

// UnmountedNotifyJobs are the jobs that owe the notifications of an
// audit row whose profile is not mounted in this process: one
// notify_route job, which, as any job of a profile, waits for an
// instance mounting the profile, until the deliveries' own deadline
// (notify.Lifetime after the event). The caller stores it in the
// transaction that records the event.
func UnmountedNotifyJobs(ev store.AuditEvent) []store.NewJob {
	ne := auditNotifyEvent(ev)
	b, err := json.Marshal(notifyRoutePayload{Profile: ev.Profile, Event: ne})
	if err != nil {
		return nil // an Event always marshals
	}
	return []store.NewJob{{Kind: NotifyRouteKind, Payload: b, Deadline: ne.Time.Add(notify.Lifetime), MaxAttempts: notify.MaxAttempts}}
}

// NotifyRouteJobs runs notify_route jobs: where the job's profile is
// mounted, the event's deliveries to the profile's destinations are
// queued, and the job is done; elsewhere it is retried later without
// spending an attempt. Each delivery is keyed by the route job and its
// place among them, so that an attempt run again (the instance died
// before the job was recorded done) finds those it queued, while they
// are live, instead of queueing them twice.
func NotifyRouteJobs(profiles Profiles) jobs.Handler {
	return &profileJobs[notifyRoutePayload]{kind: NotifyRouteKind, profiles: profiles,
		run: func(ctx context.Context, au *Authority, job *jobs.Job, p notifyRoutePayload) jobs.Outcome {
			deliveries := au.notifyJobs(p.Event)
			for i, nj := range deliveries {
				if _, _, err := au.queue.Enqueue(ctx, jobs.Spec{Kind: nj.Kind, Key: "route-" + strconv.FormatInt(job.ID, 10) + "-" + strconv.Itoa(i),
					Payload: json.RawMessage(nj.Payload), Deadline: nj.Deadline, MaxAttempts: nj.MaxAttempts}); err != nil {
					return jobs.Retry("queueing the deliveries of profile " + p.Profile + ": " + err.Error())
				}
			}
			return jobs.Done()
		}}
}
