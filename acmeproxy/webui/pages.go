package webui

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// ---- overview ----

// bar is one hour of the overview's chart, laid out in SVG units.
type bar struct {
	X, Y, H, FY, FH float64
	Label           string
}

// chart lays out the overview's hours as bars 10 units wide in a 240×60
// box: issuances from the bottom, failures stacked on them.
func chart(hours []operator.HourCount) (bars []bar, peak int) {
	for _, h := range hours {
		peak = max(peak, h.Issued+h.Failed)
	}
	scale := 0.0
	if peak > 0 {
		scale = 56.0 / float64(peak)
	}
	for i, h := range hours {
		ih, fh := float64(h.Issued)*scale, float64(h.Failed)*scale
		bars = append(bars, bar{X: float64(i) * 10, Y: 60 - ih, H: ih, FY: 60 - ih - fh, FH: fh,
			Label: fmt.Sprintf("%s: %d issued, %d failed", h.Hour.Format("15:04"), h.Issued, h.Failed)})
	}
	return bars, peak
}

func overview(rq *request, _ string) {
	ov, err := rq.op().Overview(rq.r.Context())
	if rq.failed(err) {
		return
	}
	// Orders by profile, then status, in the statuses' order of life.
	type row struct {
		Profile string
		Counts  []int
		Total   int
	}
	statuses := []acme.Status{acme.StatusPending, acme.StatusReady, acme.StatusProcessing, acme.StatusValid, acme.StatusInvalid}
	var rows []row
	idx := map[string]int{}
	for _, c := range ov.Orders {
		i, ok := idx[c.Profile]
		if !ok {
			i = len(rows)
			idx[c.Profile] = i
			rows = append(rows, row{Profile: c.Profile, Counts: make([]int, len(statuses))})
		}
		for j, s := range statuses {
			if s == c.Status {
				rows[i].Counts[j] += c.Count
			}
		}
		rows[i].Total += c.Count
	}
	bars, peak := chart(ov.Hours)
	// The lists behind the window's counts, filtered by the same window:
	// each shows the rows its number counts.
	since := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	eventsSince := ov.At
	if len(ov.Hours) > 0 {
		eventsSince = ov.Hours[0].Hour
	}
	audit := func(event string) string {
		return rq.base + "audit?" + url.Values{"event": {event}, "since": {since(eventsSince)}}.Encode()
	}
	rq.render(http.StatusOK, "overview", "Overview", struct {
		operator.Overview
		Statuses               []acme.Status
		OrderRows              []row
		Bars                   []bar
		Peak                   int
		OrdersSince            string
		IssuedList, FailedList string
	}{ov, statuses, rows, bars, peak, since(ov.OrdersSince),
		audit(acme.EventCertificateIssued), audit(acme.EventCertificateIssueFailed)})
}

// ---- orders ----

// listOrders lists orders a page at a time, as the admin API does, the
// search by serial too: a serial is unique per issuing CA only, so it may
// find several orders (see operator.ListOrders), narrowed by the other
// filters like any search.
func listOrders(rq *request, _ string) {
	since, err := parseTime("since", rq.query("since"))
	if rq.failed(err) {
		return
	}
	f := store.OrderFilter{Profile: rq.query("profile"), Status: acme.Status(rq.query("status")), AccountID: rq.query("account"),
		Identifier: rq.query("identifier"), Serial: rq.query("serial"), Since: since, After: rq.query("after"), Limit: pageLimit}
	p, err := rq.op().ListOrders(rq.r.Context(), f)
	if rq.failed(err) {
		return
	}
	rq.render(http.StatusOK, "orders", "Orders", listPage[operator.OrderView]{Page: p, Next: rq.next("after", p.Next), Filter: rq.filters(operator.OrderFilters)})
}

// listPage is what a list's page shows: one page of items, the link to
// the next page and the filters echoed back into the list's form. One type
// serves every list, so their templates read the same fields.
type listPage[T any] struct {
	operator.Page[T]
	Next   string
	Filter map[string]string
}

// filters echoes a list's filters back into its form.
func (rq *request) filters(names []string, more ...string) map[string]string {
	m := map[string]string{}
	for _, n := range append(names, more...) {
		m[n] = rq.query(n)
	}
	return m
}

func showOrder(rq *request, id string) {
	ctx := rq.r.Context()
	o, err := rq.op().ShowOrder(ctx, id)
	if rq.failed(err) {
		return
	}
	authzs, err := rq.op().OrderAuthorizations(ctx, o)
	if rq.failed(err) {
		return
	}
	audit, err := rq.op().SearchAudit(ctx, store.AuditFilter{OrderID: id, Limit: pageLimit})
	if rq.failed(err) {
		return
	}
	// More rows than a page: the audit search lists them all, page by page.
	more := ""
	if audit.Next != "" {
		more = rq.base + "audit?" + url.Values{"order": {id}, "before": {audit.Next}}.Encode()
	}
	rq.render(http.StatusOK, "order", "Order "+id, struct {
		Order             operator.OrderView
		Authzs            []operator.AuthzView
		Audit             []operator.AuditView
		MoreAudit         string
		MarkKeyCompromise bool
	}{o, authzs, audit.Items, more, rq.canMarkKeyCompromise(o)})
}

// canMarkKeyCompromise says whether an operator may change the reason of
// o's revoked certificate to keyCompromise (a key found compromised after
// the fact): its reason is another, and its revocation is in this
// database's ledger — a backend's revocation (relay, script) is not
// re-reasoned from here.
func (rq *request) canMarkKeyCompromise(o operator.OrderView) bool {
	c := o.Certificate
	if c == nil || c.RevokedAt == nil || (c.Reason != nil && *c.Reason == acme.ReasonKeyCompromise) {
		return false
	}
	// A front end's profile list says "delegated": its revocations are
	// recorded in the ledger when its workers' signer is a local CA.
	ledger, err := rq.op().RevokesInLedger(rq.r.Context(), o.Profile)
	return err == nil && ledger
}

func orderChain(rq *request, id string) {
	o, err := rq.op().ShowOrder(rq.r.Context(), id)
	if rq.failed(err) {
		return
	}
	if o.Certificate == nil || o.Certificate.ChainPEM == "" {
		rq.fail(http.StatusNotFound, fmt.Errorf("order %s has no certificate", id))
		return
	}
	h := rq.w.Header()
	h.Set("Content-Type", "application/pem-certificate-chain")
	h.Set("Content-Disposition", `attachment; filename="`+o.Certificate.Serial+`.pem"`)
	_, _ = rq.w.Write([]byte(o.Certificate.ChainPEM))
}

// revocationReason is an RFC 5280 §5.3.1 CRLReason code and its name.
type revocationReason struct {
	Code int
	Name string
}

// reasonsOf names codes for the revoke form's choice.
func reasonsOf(codes ...int) []revocationReason {
	rs := make([]revocationReason, len(codes))
	for i, c := range codes {
		rs[i] = revocationReason{c, acme.ReasonName(c)}
	}
	return rs
}

// confirmRevoke asks before a revocation, or before changing a revoked
// certificate's reason to keyCompromise; an order whose certificate can be
// neither is answered as its revocation would be (409), not with a form
// bound to fail.
func confirmRevoke(rq *request, id string) {
	o, err := rq.op().ShowOrder(rq.r.Context(), id)
	if rq.failed(err) {
		return
	}
	c, offered := o.Certificate, reasonsOf(authority.OperatorReasons()...)
	switch {
	case c == nil:
		rq.fail(0, fmt.Errorf("%w: order %s is %s and has no certificate", operator.ErrConflict, id, o.Status))
		return
	case c.RevokedAt != nil && !rq.canMarkKeyCompromise(o):
		rq.fail(0, fmt.Errorf("%w: the certificate of order %s is already revoked", operator.ErrConflict, id))
		return
	case c.RevokedAt != nil:
		offered = reasonsOf(acme.ReasonKeyCompromise)
	}
	rq.render(http.StatusOK, "revoke", "Revoke order "+id, struct {
		Order   operator.OrderView
		Reasons []revocationReason
	}{o, offered})
}

func revokeOrder(rq *request, id string) {
	var reason *int
	if v := rq.r.PostForm.Get("reason"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			rq.fail(http.StatusBadRequest, fmt.Errorf("reason %q is not a number", operator.Clip(v)))
			return
		}
		reason = &n
	}
	before, err := rq.op().ShowOrder(rq.r.Context(), id)
	if rq.failed(err) {
		return
	}
	res, err := rq.op().RevokeOrder(rq.r.Context(), id, reason, rq.actor())
	if rq.failed(err) {
		return
	}
	if res.Queued {
		// The backend (a relay's upstream, a script) has not confirmed
		// yet, and may still refuse: not announced as done.
		rq.done("orders/"+id, "revoke-queued")
		return
	}
	if c := before.Certificate; c != nil && c.RevokedAt != nil {
		rq.done("orders/"+id, "key-compromise")
		return
	}
	rq.done("orders/"+id, "revoked")
}

// ---- accounts ----

func listAccounts(rq *request, _ string) {
	f := store.AccountFilter{Profile: rq.query("profile"), Status: acme.Status(rq.query("status")), After: rq.query("after"), Limit: pageLimit}
	p, err := rq.op().ListAccounts(rq.r.Context(), f)
	if rq.failed(err) {
		return
	}
	rq.render(http.StatusOK, "accounts", "Accounts", listPage[operator.AccountView]{p, rq.next("after", p.Next), rq.filters(operator.AccountFilters)})
}

func showAccount(rq *request, id string) {
	ctx := rq.r.Context()
	a, err := rq.op().ShowAccount(ctx, id)
	if rq.failed(err) {
		return
	}
	orders, err := rq.op().ListOrders(ctx, store.OrderFilter{AccountID: id, Limit: pageLimit})
	if rq.failed(err) {
		return
	}
	rq.render(http.StatusOK, "account", "Account "+id, struct {
		Account operator.AccountView
		Orders  []operator.OrderView
	}{a, orders.Items})
}

// confirmation is what a confirmation page asks.
type confirmation struct {
	Question string
	Action   string // the form's path below the base
	Button   string
	Back     string
}

func confirmDeactivate(rq *request, id string) {
	a, err := rq.op().ShowAccount(rq.r.Context(), id)
	if rq.failed(err) {
		return
	}
	if a.Status != acme.StatusValid {
		rq.fail(0, fmt.Errorf("%w: account %s is %s already", operator.ErrConflict, id, a.Status))
		return
	}
	rq.render(http.StatusOK, "confirm", "Deactivate account", confirmation{
		Question: fmt.Sprintf("Deactivate account %s of profile %s? Its key will then only be able to revoke what it ordered; this cannot be undone.", a.ID, a.Profile),
		Action:   "accounts/" + id + "/do-deactivate", Button: "Deactivate the account", Back: "accounts/" + id})
}

func deactivateAccount(rq *request, id string) {
	if _, err := rq.op().DeactivateAccount(rq.r.Context(), id, rq.actor()); rq.failed(err) {
		return
	}
	rq.done("accounts/"+id, "deactivated")
}

// ---- jobs ----

func listJobs(rq *request, _ string) {
	var before int64
	if v := rq.query("before"); v != "" {
		n, err := parseID("before", v)
		if rq.failed(err) {
			return
		}
		before = n
	}
	owed, err := operator.ParseAbandonOwed(rq.query("abandon_owed"))
	if rq.failed(err) {
		return
	}
	f := store.JobFilter{Kind: rq.query("kind"), Status: store.JobStatus(rq.query("status")), Key: rq.query("key"), AbandonOwed: owed,
		BeforeID: before, Limit: pageLimit}
	p, err := rq.op().ListJobs(rq.r.Context(), f)
	if rq.failed(err) {
		return
	}
	rq.render(http.StatusOK, "jobs", "Jobs", listPage[operator.JobView]{p, rq.next("before", p.Next), rq.filters(operator.JobFilters)})
}

// job looks up the job a page's path names; false once it has answered
// that the ID is malformed or names no job. The job's page and its
// confirmations look it up alike.
func (rq *request) job(id string) (operator.JobView, bool) {
	n, err := parseID("job id", id)
	if rq.failed(err) {
		return operator.JobView{}, false
	}
	j, err := rq.op().ShowJob(rq.r.Context(), n)
	if rq.failed(err) {
		return operator.JobView{}, false
	}
	return j, true
}

func showJob(rq *request, id string) {
	j, ok := rq.job(id)
	if !ok {
		return
	}
	now := rq.op().Now()
	rq.render(http.StatusOK, "job", fmt.Sprintf("Job %d", j.ID), struct {
		operator.JobView
		CanRetry, PastDeadline bool
	}{j, j.CanRetry(now), j.PastDeadline(now)})
}

func confirmJob(action string) func(*request, string) {
	return func(rq *request, id string) {
		j, ok := rq.job(id)
		if !ok {
			return
		}
		// A job whose state the action does not take is answered as the
		// action would be (409), not with a form bound to fail.
		if err := jobRefusal(j, action, rq.op().Now()); err != nil {
			rq.fail(0, err)
			return
		}
		q := fmt.Sprintf("Make job %d (%s, %s) run now, with a fresh attempt budget if it had given up?", j.ID, j.Kind, j.Status)
		if action == "cancel" {
			q = fmt.Sprintf("Cancel job %d (%s, %s)? A running job's current attempt becomes its last.", j.ID, j.Kind, j.Status)
		}
		rq.render(http.StatusOK, "confirm", action+" job", confirmation{Question: q, Action: "jobs/" + id + "/do-" + action,
			Button: map[string]string{"retry": "Retry the job now", "cancel": "Cancel the job"}[action], Back: "jobs/" + id})
	}
}

// jobRefusal says why a job's state at now does not take action ("retry"
// or "cancel"), or is nil when it does.
func jobRefusal(j operator.JobView, action string, now time.Time) error {
	switch {
	case action == "retry" && j.Status != string(store.JobRunning) && j.Status != string(store.JobDone) && j.PastDeadline(now):
		return fmt.Errorf("%w: job %d (%s) is past its deadline (%s), so a retry would only see it retired again",
			operator.ErrConflict, j.ID, j.Kind, j.Deadline.UTC().Format(time.RFC3339))
	case action == "retry" && !j.CanRetry(now):
		return fmt.Errorf("%w: job %d (%s) is %s, which is not retried", operator.ErrConflict, j.ID, j.Kind, j.Status)
	case action == "cancel" && j.Recurring:
		return fmt.Errorf("%w: job %d (%s) is recurring housekeeping, which is not cancelled; retry runs it now", operator.ErrConflict, j.ID, j.Kind)
	case action == "cancel" && j.CancelRequested && j.Status == string(store.JobRunning):
		return fmt.Errorf("%w: job %d (%s) is running with its cancel requested already", operator.ErrConflict, j.ID, j.Kind)
	case action == "cancel" && !j.CanCancel():
		return fmt.Errorf("%w: job %d (%s) is %s, which is not cancelled", operator.ErrConflict, j.ID, j.Kind, j.Status)
	}
	return nil
}

func jobAction(action string) func(*request, string) {
	return func(rq *request, id string) {
		n, err := parseID("job id", id)
		if rq.failed(err) {
			return
		}
		do, done := rq.op().RetryJobAs, "retried"
		if action == "cancel" {
			do, done = rq.op().CancelJobAs, "cancelled"
		}
		j, err := do(rq.r.Context(), n, rq.actor())
		if rq.failed(err) {
			return
		}
		if action == "cancel" && j.Status == string(store.JobRunning) {
			// A running job is not stopped mid-attempt: it is cancelled
			// when this attempt ends.
			done = "cancel-requested"
		}
		rq.done("jobs/"+id, done)
	}
}

// ---- audit ----

func searchAudit(rq *request, _ string) {
	f := store.AuditFilter{Profile: rq.query("profile"), Event: rq.query("event"), Outcome: rq.query("outcome"), OrderID: rq.query("order"),
		AccountID: rq.query("account"), Serial: rq.query("serial"), Limit: pageLimit}
	var err error
	if f.Since, err = parseTime("since", rq.query("since")); err == nil {
		f.Until, err = parseTime("until", rq.query("until"))
	}
	if v := rq.query("before"); err == nil && v != "" {
		f.BeforeID, err = parseID("before", v)
	}
	if rq.failed(err) {
		return
	}
	p, err := rq.op().SearchAudit(rq.r.Context(), f)
	if rq.failed(err) {
		return
	}
	rq.render(http.StatusOK, "audit", "Audit", listPage[operator.AuditView]{p, rq.next("before", p.Next), rq.filters(operator.AuditFilters)})
}

// ---- template functions ----

var funcs = template.FuncMap{
	"problem": problemText,
	"list":    func(s ...string) []string { return s },
	"title":   func(s string) string { return strings.ToUpper(s[:1]) + s[1:] },
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return fmt.Sprint(t)
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return d.Round(time.Second).String()
	},
	"until": func(now, t time.Time) string {
		d := t.Sub(now).Round(time.Second)
		if d < 0 {
			return "overdue by " + (-d).String()
		}
		return "in " + d.String()
	},
	"pct":   func(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%" },
	"rate":  func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"float": func(n int) float64 { return float64(n) },
	"reason": func(r *int) string {
		if r == nil {
			return acme.ReasonName(acme.ReasonUnspecified)
		}
		if name := acme.ReasonName(*r); name != "" {
			return name
		}
		return strconv.Itoa(*r)
	},
	"auditReason": auditReason,
	"idents": func(ids []acme.Identifier) string {
		s := ""
		for i, id := range ids {
			if i > 0 {
				s += ", "
			}
			s += id.Value
		}
		return s
	},
}

// problemReasons are the events whose audit reason is an ACME problem
// type; the reason of any other (an account_binding_refused row's kid,
// which the client chose) is never read as one.
var problemReasons = map[string]bool{acme.EventChallengeFailed: true, acme.EventRevocationRefused: true, acme.EventFinalizeRefused: true}

// auditReason shows an audit row's reason: a revocation's code with its
// name ("4 (superseded)"), a problem type without the ACME error
// namespace ("incorrectResponse", as an order's problem reads), anything
// else as recorded.
func auditReason(event, reason string) string {
	switch {
	case problemReasons[event]:
		return acme.ProblemType(reason).Short()
	case event == acme.EventCertificateRevoked, event == acme.EventRevocationReasonChanged:
		if n, err := strconv.Atoi(reason); err == nil {
			return acme.ReasonText(n)
		}
	}
	return reason
}

// problemText renders a stored problem document (RFC 7807) as an operator
// reads it: its ACME type without the URN's prefix, its detail, and each
// subproblem's, rather than the JSON with its escapes. What does not
// decode as one is shown as it is.
func problemText(doc any) string {
	var raw []byte
	switch v := doc.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		return fmt.Sprint(doc)
	}
	var p struct {
		Type        string `json:"type"`
		Detail      string `json:"detail"`
		Subproblems []struct {
			Type       string `json:"type"`
			Detail     string `json:"detail"`
			Identifier struct {
				Value string `json:"value"`
			} `json:"identifier"`
		} `json:"subproblems"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.Type == "" {
		return string(raw)
	}
	short := func(t string) string { return acme.ProblemType(t).Short() }
	out := short(p.Type) + ": " + p.Detail
	for _, sp := range p.Subproblems {
		out += "; " + sp.Identifier.Value + " " + short(sp.Type) + ": " + sp.Detail
	}
	return out
}
