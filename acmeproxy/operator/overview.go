package operator

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// OverviewWindow is how far back the overview counts orders and issuances.
const OverviewWindow = 24 * time.Hour

// overviewFailures is how many of the last failures the overview lists.
const overviewFailures = 10

// Overview is the state of this server at a glance: what the web page's
// first page shows.
type Overview struct {
	At       time.Time     `json:"at"`
	Profiles []ProfileView `json:"profiles"`
	// Orders counts the orders created since OrdersSince (the window, to
	// the second), by profile and status: the orders list filtered by
	// since=OrdersSince shows them.
	Orders      []store.OrderCount `json:"orders"`
	OrdersSince time.Time          `json:"orders_since"`
	// Hours are the window's hours, oldest first, with the certificates
	// issued and the issuances failed in each; Issued and Failed are
	// their sums, the audit rows of their events since the first hour.
	Hours  []HourCount `json:"hours"`
	Issued int         `json:"issued"`
	Failed int         `json:"failed"`
	// Jobs counts the queue by kind and status; OldestWaiting is how long
	// the longest waiting job of its kind has been due and not taken.
	Jobs []JobQueueView `json:"jobs"`
	// Unrun are the ready jobs of the kinds this process's runner does
	// not handle, by kind: left by a profile or a notifier since removed
	// from the config (or for another instance to run), they wait here
	// for ever. Empty when the operator was not told the runner's kinds.
	Unrun []KindCount `json:"unrun,omitempty"`
	// UnrunAbandons are the cancelled jobs of the kinds this process's
	// runner does not handle whose Abandon is still owed, by kind: the
	// orders they worked for stay as they are (processing, a revocation
	// unrecorded) until a runner of the kind, here or on another
	// instance, gives them up. Empty when the operator was not told the
	// runner's kinds.
	UnrunAbandons []KindCount `json:"unrun_abandons,omitempty"`
	CRLs          []CRLStatus `json:"crls"`
	// Failures are the last audit rows with outcome failure.
	Failures []AuditView `json:"failures"`
}

// HourCount is one hour of the overview's chart.
type HourCount struct {
	Hour   time.Time `json:"hour"`
	Issued int       `json:"issued"`
	Failed int       `json:"failed"`
}

// JobQueueView is the number of jobs of one kind in one status.
type JobQueueView struct {
	Kind          string        `json:"kind"`
	Status        string        `json:"status"`
	Count         int64         `json:"count"`
	OldestWaiting time.Duration `json:"oldest_waiting,omitempty"` // ready jobs due now only
}

// KindCount is the number of jobs of one kind.
type KindCount struct {
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// UnrunJobs is the number of jobs Unrun counts.
func (o Overview) UnrunJobs() int64 { return totalOf(o.Unrun) }

// UnrunAbandonJobs is the number of jobs UnrunAbandons counts.
func (o Overview) UnrunAbandonJobs() int64 { return totalOf(o.UnrunAbandons) }

// totalOf is the number of jobs counts counts.
func totalOf(counts []KindCount) int64 {
	var n int64
	for _, k := range counts {
		n += k.Count
	}
	return n
}

// CRLStatus is a profile's CRL, or why it has none to show.
type CRLStatus struct {
	CRLView
	Error string `json:"error,omitempty"`
}

// FailureRate is the share of the window's issuances that failed, 0 to 1.
func (o Overview) FailureRate() float64 {
	if o.Issued+o.Failed == 0 {
		return 0
	}
	return float64(o.Failed) / float64(o.Issued+o.Failed)
}

// IssuedPerHour is the window's mean issuance rate.
func (o Overview) IssuedPerHour() float64 {
	return float64(o.Issued) / OverviewWindow.Hours()
}

// Overview reads the overview.
func (op *Operator) Overview(ctx context.Context) (Overview, error) {
	now := op.now()
	since := now.Add(-OverviewWindow).Truncate(time.Hour).Add(time.Hour) // 24 whole hours, the current one last
	// To the second, as the orders list's since filter reads it.
	ov := Overview{At: now, OrdersSince: now.Add(-OverviewWindow).Truncate(time.Second).UTC()}
	var err error
	if ov.Profiles, err = op.ListProfiles(ctx); err != nil {
		return Overview{}, err
	}
	if ov.Orders, err = op.DB.OrderCountsSince(ctx, ov.OrdersSince); err != nil {
		return Overview{}, err
	}
	hours, err := op.DB.EventsPerHour(ctx, since, acme.EventCertificateIssued, acme.EventCertificateIssueFailed)
	if err != nil {
		return Overview{}, err
	}
	for h := since; !h.After(now); h = h.Add(time.Hour) {
		ov.Hours = append(ov.Hours, HourCount{Hour: h.UTC()})
	}
	for _, e := range hours {
		i := int(e.Hour.Sub(since) / time.Hour)
		if i < 0 || i >= len(ov.Hours) {
			continue
		}
		if e.Event == acme.EventCertificateIssued {
			ov.Hours[i].Issued += e.Count
			ov.Issued += e.Count
		} else {
			ov.Hours[i].Failed += e.Count
			ov.Failed += e.Count
		}
	}
	counts, err := op.DB.CountJobs(ctx)
	if err != nil {
		return Overview{}, err
	}
	oldest, err := op.DB.OldestReadyJobs(ctx, now)
	if err != nil {
		return Overview{}, err
	}
	var run []string
	if op.RunKinds != nil {
		run = op.RunKinds()
	}
	for _, c := range counts {
		if run != nil && c.Status == store.JobReady && !slices.Contains(run, c.Kind) {
			ov.Unrun = append(ov.Unrun, KindCount{Kind: c.Kind, Count: c.N})
		}
		v := JobQueueView{Kind: c.Kind, Status: string(c.Status), Count: c.N}
		if t, ok := oldest[c.Kind]; ok && c.Status == store.JobReady {
			v.OldestWaiting = max(now.Sub(t), 0)
		}
		ov.Jobs = append(ov.Jobs, v)
	}
	if run != nil {
		owed, err := op.DB.CountOwedAbandons(ctx)
		if err != nil {
			return Overview{}, err
		}
		for _, c := range owed {
			if !slices.Contains(run, c.Kind) {
				ov.UnrunAbandons = append(ov.UnrunAbandons, KindCount{Kind: c.Kind, Count: c.N})
			}
		}
	}
	for _, p := range ov.Profiles {
		delegated := p.Revocation == "delegated"
		if !p.CRL && !delegated {
			continue
		}
		v, err := op.ShowCRL(ctx, p.Name)
		if delegated {
			// A front end serves a CRL when its workers published one:
			// none yet, or a signer that has none (a relay), is no
			// CRL rather than a CRL in error.
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
		}
		st := CRLStatus{CRLView: v}
		if err != nil {
			st = CRLStatus{CRLView: CRLView{Profile: p.Name}, Error: err.Error()}
		}
		ov.CRLs = append(ov.CRLs, st)
		ov.CRLs = append(ov.CRLs, op.earlierCRLs(ctx, p.Name)...)
	}
	fails, err := op.SearchAudit(ctx, store.AuditFilter{Outcome: authority.OutcomeFailure, Limit: overviewFailures})
	if err != nil {
		return Overview{}, err
	}
	ov.Failures = fails.Items
	return ov, nil
}

// earlierCRLs is the status of the CRL of each CA in service of profile
// other than the one it issues from now (ShowCRL's): after a CA's key
// changed, the earlier CA's CRL is still published and refreshed until the
// CA expires, and one that lapses is as much the operator's concern.
func (op *Operator) earlierCRLs(ctx context.Context, profile string) []CRLStatus {
	au, ok := op.Profiles.Lookup(profile)
	if !ok {
		return nil
	}
	cur, err := au.CurrentIssuer(ctx)
	if err != nil {
		return nil // the current CRL's row says what is wrong
	}
	issuers, err := au.CRLIssuersInService(ctx)
	if err != nil {
		return []CRLStatus{{CRLView: CRLView{Profile: profile}, Error: fmt.Sprintf("the CAs in service: %v", err)}}
	}
	var out []CRLStatus
	for _, iss := range issuers {
		if iss.KeyID == cur.KeyID {
			continue
		}
		crl, err := op.DB.GetCRLInfo(ctx, iss.KeyID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			out = append(out, CRLStatus{CRLView: CRLView{Profile: profile, Issuer: iss.KeyID},
				Error: fmt.Sprintf("no CRL of CA %s (in service until %s) is published", iss.KeyID, iss.NotAfter.UTC().Format(time.RFC3339))})
		case err != nil:
			out = append(out, CRLStatus{CRLView: CRLView{Profile: profile, Issuer: iss.KeyID}, Error: err.Error()})
		default:
			out = append(out, CRLStatus{CRLView: crlView(profile, crl)})
		}
	}
	return out
}

// normalSerial is a serial given in hex — with or without colons, in any
// case, with or without leading zeros — as the store keeps it: the
// number's big-endian octets in lower-case hex, two digits each
// (hex.EncodeToString of big.Int.Bytes, as issuance stores it). Every
// operator's input of a serial passes here, so that one certificate is
// found whichever way a tool printed its serial: Go's Text(16) and many
// others drop the leading zero that openssl's even-length form keeps, and
// a serial whose first octet is below 0x10 would otherwise match in one
// search and not in another. A serial is a positive number of at most 20
// octets (RFC 5280 §4.1.2.2).
func normalSerial(serial string) (string, error) {
	s := strings.ReplaceAll(strings.TrimSpace(serial), ":", "")
	if s == "" || strings.Trim(s, "0123456789abcdefABCDEF") != "" {
		return "", fmt.Errorf("%w: serial %q is not hexadecimal", ErrInvalid, Clip(serial))
	}
	n, _ := new(big.Int).SetString(s, 16) // hex digits only: it parses
	if n.Sign() == 0 || n.BitLen() > 8*maxSerialOctets {
		return "", fmt.Errorf("%w: serial %q is not a certificate serial (a positive number of at most %d octets)", ErrInvalid, Clip(serial), maxSerialOctets)
	}
	return hex.EncodeToString(n.Bytes()), nil
}

// maxSerialOctets is RFC 5280's bound on a certificate serial's length.
const maxSerialOctets = 20

// RetryJobAs is RetryJob, audited with actor: the retry and its audit row
// are one write, so that no retry is stored without the row saying who
// asked for it.
func (op *Operator) RetryJobAs(ctx context.Context, id int64, actor authority.Actor) (JobView, error) {
	j, err := op.Queue.RetryNowAudited(ctx, id, func(j jobs.Job) store.AuditEvent {
		return op.jobAudit(acme.EventJobRetried, actor, jobView(j))
	})
	if err != nil {
		return JobView{}, jobErr(err)
	}
	return jobView(j), nil
}

// CancelJobAs is CancelJob, audited with actor: the cancel and its audit
// row are one write (see RetryJobAs).
func (op *Operator) CancelJobAs(ctx context.Context, id int64, actor authority.Actor) (JobView, error) {
	j, err := op.Queue.CancelAudited(ctx, id, func(j jobs.Job) store.AuditEvent {
		return op.jobAudit(acme.EventJobCancelled, actor, jobView(j))
	})
	if err != nil {
		return JobView{}, jobErr(err)
	}
	return jobView(j), nil
}

// jobAudit is the audit row of an operator's event about job j, as the
// change left it.
func (op *Operator) jobAudit(event string, actor authority.Actor, j JobView) store.AuditEvent {
	ev := store.AuditEvent{At: op.now(), Event: event, Outcome: authority.OutcomeSuccess, ActorKind: actor.Kind, ActorID: actor.ID,
		Detail: fmt.Sprintf("job %d (%s) is now %s", j.ID, j.Kind, j.Status)}
	// The profile and order the job works for, so that the audit trail of
	// an order (or a profile) shows an operator's cancel that failed it:
	// every job payload of a profile's work names them so.
	var about struct {
		Profile string `json:"profile"`
		Order   string `json:"order"`
	}
	if json.Unmarshal(j.Payload, &about) == nil {
		ev.Profile, ev.OrderID = Clip(about.Profile), Clip(about.Order)
	}
	return ev
}

// AuthzView is an authorization of an order, with its challenges.
type AuthzView struct {
	ID         string          `json:"id"`
	Identifier acme.Identifier `json:"identifier"`
	Wildcard   bool            `json:"wildcard,omitempty"`
	Status     acme.Status     `json:"status"`
	Expires    time.Time       `json:"expires"`
	Challenges []ChallengeView `json:"challenges"`
}

// ChallengeView is a challenge as operators see it (without its token).
type ChallengeView struct {
	Type      string      `json:"type"`
	Status    acme.Status `json:"status"`
	Validated *time.Time  `json:"validated,omitempty"`
	Error     string      `json:"error,omitempty"` // the problem document
}

// OrderAuthorizations reads the authorizations of an order, in order.
func (op *Operator) OrderAuthorizations(ctx context.Context, o OrderView) ([]AuthzView, error) {
	ord, err := op.DB.GetOrder(ctx, o.Profile, o.ID)
	if err != nil {
		return nil, err
	}
	out := []AuthzView{}
	for _, id := range ord.AuthzIDs {
		a, err := op.DB.GetAuthz(ctx, o.Profile, id)
		if err != nil {
			return nil, err
		}
		v := AuthzView{ID: a.ID, Identifier: a.Identifier, Wildcard: a.Wildcard, Status: a.Status, Expires: a.Expires, Challenges: []ChallengeView{}}
		for _, c := range a.Challenges {
			v.Challenges = append(v.Challenges, ChallengeView{Type: c.Type, Status: c.Status, Validated: timePtr(c.Validated), Error: string(c.Error)})
		}
		out = append(out, v)
	}
	return out, nil
}
