// Package operator is what operators do, shared by the admin API, the CLI
// and the web page: read orders, accounts, jobs and the audit trail, and
// revoke, deactivate, retry, cancel and regenerate. It works on the
// profiles' authorities.
package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Operator errors, beside store.ErrNotFound; the admin API turns each into
// its HTTP status.
var (
	// ErrInvalid: the request itself is wrong (a bad filter, reason, id).
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the resource is not in a state that allows the change.
	ErrConflict = errors.New("conflict")
	// ErrNotMounted: the profile is not served by this process.
	ErrNotMounted = errors.New("profile not mounted in this process")
	// ErrBackendFailed: a signer's backend (an upstream CA, a script)
	// gave up the change, not this server.
	ErrBackendFailed = errors.New("backend failed")
)

// ProfileLister finds and lists the profiles mounted in this process.
type ProfileLister interface {
	authority.Profiles
	All() []*authority.Authority
}

// Operator is what the admin API and the CLI do: read orders, accounts,
// jobs and the audit trail, and revoke, deactivate, retry, cancel and
// regenerate. It is trusted: whoever reaches it is an operator.
type Operator struct {
	DB       *store.DB
	Queue    *jobs.Queue
	Profiles ProfileLister
	Clock    clock.Clock // default: the wall clock
	// RunKinds lists the kinds of job this process's runner handles, for
	// the overview's count of jobs nobody here runs; nil, or a nil answer,
	// when not known (no runner yet), and the overview then counts none.
	RunKinds func() []string
}

// Now is the operator's clock's time: what a front asks a view's
// CanRetry with.
func (op *Operator) Now() time.Time { return op.now() }

// now is the operator's clock's time.
func (op *Operator) now() time.Time {
	if op.Clock == nil {
		return time.Now()
	}
	return op.Clock.Now()
}

// Filter names: the query parameters of the admin API's lists and the
// flags of the CLI that sets them, one set for both. Each list's names are
// those of its store filter's fields.
var (
	OrderFilters   = []string{"profile", "status", "identifier", "account", "serial", "since", "after", "limit"}
	AccountFilters = []string{"profile", "status", "after", "limit"}
	JobFilters     = []string{"kind", "status", "key", "abandon_owed", "before", "limit"}
	AuditFilters   = []string{"profile", "event", "outcome", "order", "account", "serial", "since", "until", "before", "limit"}
	EABFilters     = []string{"profile", "after", "limit"}
)

// Page is one page of a list; Next, when set, is the cursor of the next.
type Page[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

func page[T any](items []T, limit int, cursor func(T) string) Page[T] {
	p := Page[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if len(items) > 0 && len(items) == limit {
		p.Next = cursor(items[len(items)-1])
	}
	return p
}

// ---- profiles ----

// ProfileView describes a mounted profile.
type ProfileView struct {
	Name       string   `json:"name"`
	Prefix     string   `json:"prefix"`
	Signer     string   `json:"signer"`
	Revocation string   `json:"revocation"` // ledger, job, or delegated (as the instances holding the signer published)
	CRL        bool     `json:"crl"`
	CRLURL     string   `json:"crl_url,omitempty"`
	Challenges []string `json:"challenges"`
}

// ListProfiles lists the profiles this process mounts, by name. A
// profile mounted without its signer (a front end) has a CRL when the
// instances holding the signer published one for it to serve: its own
// delegate signer signs none, and saying so would tell the operator the
// profile has no CRL.
func (op *Operator) ListProfiles(ctx context.Context) ([]ProfileView, error) {
	var out []ProfileView
	for _, au := range op.Profiles.All() {
		crl, err := au.ServesCRL(ctx)
		if err != nil {
			return nil, fmt.Errorf("profile %s: whether it serves a CRL: %w", au.Profile(), err)
		}
		name := au.SignerName()
		if name == "" {
			name = signerName(au.Signer())
		}
		v := ProfileView{Name: au.Profile(), Prefix: au.Prefix(), Signer: name, Revocation: "ledger",
			CRL: crl, CRLURL: au.CRLURL(), Challenges: au.Challenges()}
		switch {
		case au.Delegates():
			v.Revocation = "delegated"
		case au.Signer().RevocationRoute() == signer.RevokeByJob:
			v.Revocation = "job"
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b ProfileView) int { return strings.Compare(a.Name, b.Name) })
	if out == nil {
		out = []ProfileView{}
	}
	return out, nil
}

// signerName names a signer by its Go type: "localca", "relay", ….
func signerName(sg signer.Signer) string {
	t := reflect.TypeOf(sg)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return p[strings.LastIndex(p, "/")+1:]
	}
	return t.Name()
}

// ---- orders ----

// CertificateView is an issued certificate.
type CertificateView struct {
	ID     string `json:"id"`
	Serial string `json:"serial"`
	// IssuerKeyID names the CA that issued it, as renew-early's issuer
	// and the CRL routes do (its authority key identifier in hex); ""
	// for a certificate stored before the store recorded it. A serial is
	// unique per issuer only.
	IssuerKeyID string     `json:"issuer_key_id,omitempty"`
	NotBefore   time.Time  `json:"not_before"`
	NotAfter    time.Time  `json:"not_after"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	Reason      *int       `json:"reason,omitempty"`
	ChainPEM    string     `json:"chain_pem,omitempty"`
}

// OrderView is an order as operators see it.
type OrderView struct {
	ID            string            `json:"id"`
	Profile       string            `json:"profile"`
	Account       string            `json:"account"`
	Status        acme.Status       `json:"status"`
	Identifiers   []acme.Identifier `json:"identifiers"`
	Created       time.Time         `json:"created"`
	Updated       time.Time         `json:"updated"`
	Expires       time.Time         `json:"expires"`
	NotBefore     *time.Time        `json:"not_before,omitempty"`
	NotAfter      *time.Time        `json:"not_after,omitempty"`
	Error         json.RawMessage   `json:"error,omitempty"`
	FailureDetail string            `json:"failure_detail,omitempty"`
	Certificate   *CertificateView  `json:"certificate,omitempty"`
	// AccountEABLabel is the label of the account's external account
	// binding, if it has one.
	AccountEABLabel string `json:"account_eab_label,omitempty"`
	// Replaces is the certID (RFC 9773 §4.1) of the certificate the
	// order renews, as its newOrder named it (RFC 9773 §5).
	Replaces string `json:"replaces,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func orderView(o store.OrderSummary) OrderView {
	v := OrderView{ID: o.ID, Profile: o.Profile, Account: o.AccountID, Status: o.Status, Identifiers: o.Identifiers,
		Created: o.CreatedAt, Updated: o.UpdatedAt, Expires: o.Expires, NotBefore: timePtr(o.NotBefore), NotAfter: timePtr(o.NotAfter),
		Error: o.Error, FailureDetail: o.FailureDetail, AccountEABLabel: o.AccountEABLabel, Replaces: o.Replaces}
	if c := o.Certificate; c != nil {
		v.Certificate = &CertificateView{ID: c.ID, Serial: c.Serial, IssuerKeyID: c.IssuerKeyID, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
			RevokedAt: timePtr(c.RevokedAt), Reason: c.Reason, ChainPEM: c.ChainPEM}
	}
	return v
}

// statusList says statuses for an error message: "pending, ready".
func statusList(statuses []acme.Status) string {
	s := make([]string, len(statuses))
	for i, st := range statuses {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

var orderStatuses = []acme.Status{acme.StatusPending, acme.StatusReady, acme.StatusProcessing, acme.StatusValid, acme.StatusInvalid}

// ListOrders lists orders newest first.
func (op *Operator) ListOrders(ctx context.Context, f store.OrderFilter) (Page[OrderView], error) {
	if f.Status != "" && !slices.Contains(orderStatuses, f.Status) {
		return Page[OrderView]{}, fmt.Errorf("%w: status %q is not one of %s", ErrInvalid, Clip(string(f.Status)), statusList(orderStatuses))
	}
	if f.Identifier != "" {
		f.Identifier = strings.ToLower(strings.TrimSuffix(f.Identifier, "."))
	}
	if f.Serial != "" {
		serial, err := normalSerial(f.Serial)
		if err != nil {
			return Page[OrderView]{}, err
		}
		f.Serial = serial
	}
	if f.After != "" {
		o, err := op.DB.OrderByID(ctx, f.After)
		if err != nil {
			return Page[OrderView]{}, afterErr("order", f.After, err)
		}
		if why := orderOutside(o, f); why != "" {
			return Page[OrderView]{}, outsideErr("order", f.After, why)
		}
	}
	rows, err := op.DB.ListOrders(ctx, f)
	if err != nil {
		return Page[OrderView]{}, err
	}
	views := make([]OrderView, len(rows))
	for i, o := range rows {
		views[i] = orderView(o)
	}
	return page(views, store.PageLimit(f.Limit), func(v OrderView) string { return v.ID }), nil
}

// afterErr is the answer to a page cursor naming no row: a request error
// rather than an empty page, which would read as the end of the list
// (a mistyped cursor, or a row the retention sweep removed since the
// previous page was listed: start again from the first page).
func afterErr(what, id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: after: no %s %q (a page continues after the last %s of the previous page; start from the first page)",
			ErrInvalid, what, Clip(id), what)
	}
	return err
}

// outsideErr is the answer to a page cursor naming a row the list cannot
// hold (why says why): taken as a position, it would start the page at a
// row of another list, skipping or repeating rows of this one without a
// word.
func outsideErr(what, id, why string) error {
	return fmt.Errorf("%w: after: %s %q %s, so it is not in this list (a page continues after the last %s of the previous page, listed with the same filters)",
		ErrInvalid, what, Clip(id), why, what)
}

// orderOutside says which filter of f order o, a page cursor, does not
// match; "" when it matches them all. Only what an order never changes is
// compared: an order of the previous page may have changed status since,
// and still marks where the next page starts.
func orderOutside(o store.OrderSummary, f store.OrderFilter) string {
	switch {
	case f.Profile != "" && o.Profile != f.Profile:
		return fmt.Sprintf("is of profile %s, not %s", Clip(o.Profile), Clip(f.Profile))
	case f.AccountID != "" && o.AccountID != f.AccountID:
		return fmt.Sprintf("is of account %s, not %s", Clip(o.AccountID), Clip(f.AccountID))
	case f.Identifier != "" && !slices.ContainsFunc(o.Identifiers, func(id acme.Identifier) bool { return id.Value == f.Identifier }):
		return fmt.Sprintf("has no identifier %q", Clip(f.Identifier))
	case f.Serial != "" && (o.Certificate == nil || o.Certificate.Serial != f.Serial):
		return fmt.Sprintf("has no certificate of serial %s", f.Serial)
	case !f.Since.IsZero() && o.CreatedAt.UnixMilli() < f.Since.UnixMilli():
		return fmt.Sprintf("was created before since (%s)", f.Since.UTC().Format(time.RFC3339))
	}
	return ""
}

// ShowOrder reads one order with its certificate chain.
func (op *Operator) ShowOrder(ctx context.Context, id string) (OrderView, error) {
	o, err := op.DB.OrderByID(ctx, id)
	if err != nil {
		return OrderView{}, err
	}
	return orderView(o), nil
}

// RevokeOrder revokes the certificate of an order through its profile's
// signer; the revocation is audited with actor.
func (op *Operator) RevokeOrder(ctx context.Context, id string, reason *int, actor authority.Actor) (authority.RevokeResult, error) {
	o, err := op.DB.OrderByID(ctx, id)
	if err != nil {
		return authority.RevokeResult{}, err
	}
	if o.Certificate == nil {
		return authority.RevokeResult{}, fmt.Errorf("%w: order %s is %s and has no certificate", ErrConflict, id, o.Status)
	}
	s, ok := op.Profiles.Lookup(o.Profile)
	if !ok {
		return authority.RevokeResult{}, fmt.Errorf("%w: %s (order %s)", ErrNotMounted, o.Profile, id)
	}
	res, err := s.RevokeOrder(ctx, id, reason, actor)
	switch {
	case errors.Is(err, authority.ErrAlreadyRevoked), errors.Is(err, authority.ErrCertificateExpired):
		return res, fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, authority.ErrBadRevocationReason):
		return res, fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, authority.ErrRevocationRefused):
		// The backend said no: asking again cannot change it.
		return res, fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, authority.ErrUnpublishable) && !errors.Is(err, signer.ErrIssuerUnavailable):
		// The CA is gone: asking again cannot succeed.
		return res, fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, authority.ErrRevocationCancelled):
		// Its signer_revoke job was cancelled while the request waited.
		return res, fmt.Errorf("%w: %w; %s", ErrConflict, err, notRevoked)
	case errors.Is(err, authority.ErrRevocationFailed):
		// The backend's job gave up while the request waited: the
		// backend's failure, not this server's; its last error is the
		// operator's to read, as in the jobs list.
		return res, fmt.Errorf("%w: %w; %s", ErrBackendFailed, err, notRevoked)
	}
	return res, err
}

// notRevoked ends the message of a revocation its job gave up.
const notRevoked = "the certificate is not revoked, and revoking it again queues a new attempt"

// RevokesInLedger reports whether the revocations of profile, mounted
// here, are recorded in this database's ledger — on a front end, when the
// instances holding its signer published that route — so that an
// operator may change a revoked certificate's reason to keyCompromise; a
// backend's revocation (relay, script) is not re-reasoned from here.
func (op *Operator) RevokesInLedger(ctx context.Context, profile string) (bool, error) {
	au, ok := op.Profiles.Lookup(profile)
	if !ok {
		return false, fmt.Errorf("%w: %s", ErrNotMounted, profile)
	}
	return au.RevokesInLedger(ctx)
}

// ---- accounts ----

// AccountView is an account as operators see it.
type AccountView struct {
	ID         string      `json:"id"`
	Profile    string      `json:"profile"`
	Status     acme.Status `json:"status"`
	Contact    []string    `json:"contact"`
	Thumbprint string      `json:"thumbprint"`
	Created    time.Time   `json:"created"`
	Orders     int         `json:"orders"`
	// EABKID and EABLabel are the external account binding the account
	// was created with, if any.
	EABKID   string `json:"eab_kid,omitempty"`
	EABLabel string `json:"eab_label,omitempty"`
}

func accountView(a store.AccountSummary) AccountView {
	contact := a.Contact
	if contact == nil {
		contact = []string{}
	}
	return AccountView{ID: a.ID, Profile: a.Profile, Status: a.Status, Contact: contact, Thumbprint: a.Thumbprint,
		Created: a.CreatedAt, Orders: a.Orders, EABKID: a.EABKID, EABLabel: a.EABLabel}
}

var accountStatuses = []acme.Status{acme.StatusValid, acme.StatusDeactivated, acme.StatusRevoked}

// ListAccounts lists accounts newest first.
func (op *Operator) ListAccounts(ctx context.Context, f store.AccountFilter) (Page[AccountView], error) {
	if f.Status != "" && !slices.Contains(accountStatuses, f.Status) {
		return Page[AccountView]{}, fmt.Errorf("%w: status %q is not one of %s", ErrInvalid, Clip(string(f.Status)), statusList(accountStatuses))
	}
	if f.After != "" {
		a, err := op.DB.AccountByID(ctx, f.After)
		if err != nil {
			return Page[AccountView]{}, afterErr("account", f.After, err)
		}
		// Its profile only: an account of the previous page may have
		// been deactivated since, and still marks where the next starts.
		if f.Profile != "" && a.Profile != f.Profile {
			return Page[AccountView]{}, outsideErr("account", f.After, fmt.Sprintf("is of profile %s, not %s", Clip(a.Profile), Clip(f.Profile)))
		}
	}
	rows, err := op.DB.ListAccounts(ctx, f)
	if err != nil {
		return Page[AccountView]{}, err
	}
	views := make([]AccountView, len(rows))
	for i, a := range rows {
		views[i] = accountView(a)
	}
	return page(views, store.PageLimit(f.Limit), func(v AccountView) string { return v.ID }), nil
}

// ShowAccount reads one account.
func (op *Operator) ShowAccount(ctx context.Context, id string) (AccountView, error) {
	a, err := op.DB.AccountByID(ctx, id)
	if err != nil {
		return AccountView{}, err
	}
	return accountView(a), nil
}

// DeactivateAccount deactivates a valid account (its key can then only
// revoke what it ordered), and audits it.
func (op *Operator) DeactivateAccount(ctx context.Context, id string, actor authority.Actor) (AccountView, error) {
	before, err := op.DB.AccountByID(ctx, id)
	if err != nil {
		return AccountView{}, err
	}
	ev := store.AuditEvent{At: op.now(), Event: acme.EventAccountDeactivated, Outcome: authority.OutcomeSuccess,
		Profile: before.Profile, ActorKind: actor.Kind, ActorID: actor.ID, AccountID: id}
	au, mounted := op.Profiles.Lookup(before.Profile)
	if mounted {
		ev.Jobs = au.AuditNotifyJobs(ev)
	} else {
		// The profile's destinations are known only where it is
		// mounted: a notify_route job takes the event there.
		ev.Jobs = authority.UnmountedNotifyJobs(ev)
	}
	a, err := op.DB.DeactivateAccountAudited(ctx, id, ev, ev.At)
	if errors.Is(err, store.ErrWrongState) {
		// Say what it is: deactivated already, or revoked.
		status := before.Status
		if now, rerr := op.DB.AccountByID(ctx, id); rerr == nil {
			status = now.Status
		}
		return AccountView{}, fmt.Errorf("%w: account %s is %s already", ErrConflict, id, status)
	}
	if err != nil {
		return AccountView{}, err
	}
	if mounted {
		au.Notified(ev.Jobs)
		au.Logger().Info("account deactivated", zap.String("event", acme.EventAccountDeactivated),
			zap.String("profile", a.Profile), zap.String("account", a.ID), zap.String("actor", actor.Kind))
	}
	return op.ShowAccount(ctx, id)
}

// ---- jobs ----

// JobView is a job as operators see it.
type JobView struct {
	ID              int64      `json:"id"`
	Kind            string     `json:"kind"`
	Key             string     `json:"key,omitempty"`
	Lane            string     `json:"lane,omitempty"` // "" for any instance; signer:<profile> where its signer is mounted
	Status          string     `json:"status"`
	Attempts        int        `json:"attempts"`
	MaxAttempts     int        `json:"max_attempts"`
	RunAt           time.Time  `json:"run_at"`
	Deadline        *time.Time `json:"deadline,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	CancelRequested bool       `json:"cancel_requested,omitempty"`
	// AbandonOwed: an operator cancelled the job while it waited, and its
	// kind's Abandon (failing the order it worked for, recording a
	// revocation that will not happen) has not run yet. A runner of the
	// kind, on any instance, runs it; until then the order stays as the
	// job left it.
	AbandonOwed bool `json:"abandon_owed,omitempty"`
	// Recurring is housekeeping that runs again and again (a CRL's
	// refresh, a sweep): it may be run now, not cancelled.
	Recurring bool            `json:"recurring,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Created   time.Time       `json:"created"`
	Updated   time.Time       `json:"updated"`
	Finished  *time.Time      `json:"finished,omitempty"`
}

// StatusText is the job's status as a person reads it: a cancelled job
// still owing its Abandon says on whom it waits; a running one asked to
// stop says so (it stops after its current attempt), as the web page's
// job says.
func (v JobView) StatusText() string {
	switch {
	case v.AbandonOwed:
		return v.Status + " — abandon pending on a runner of " + v.Kind
	case v.CancelRequested && store.JobStatus(v.Status) == store.JobRunning:
		return v.Status + " (cancel requested)"
	}
	return v.Status
}

// CanRetry reports whether RetryJob would take the job at now: one waiting
// for its turn (ready), or settled without success (failed, cancelled),
// whose deadline, if it has one, is still ahead. A running job is already
// running; a done one has nothing left to do; one past its deadline would
// only be retired again at its first claim, so its retry is refused.
func (v JobView) CanRetry(now time.Time) bool {
	if v.PastDeadline(now) {
		return false
	}
	switch store.JobStatus(v.Status) {
	case store.JobReady, store.JobFailed, store.JobCancelled:
		return true
	}
	return false
}

// PastDeadline reports whether the job's deadline, if it has one, has
// passed at now.
func (v JobView) PastDeadline(now time.Time) bool {
	return v.Deadline != nil && !v.Deadline.After(now)
}

// CanCancel reports whether CancelJob would take the job: a waiting one, or
// a running one not yet asked to stop; never recurring housekeeping.
func (v JobView) CanCancel() bool {
	switch store.JobStatus(v.Status) {
	case store.JobReady:
		return !v.Recurring
	case store.JobRunning:
		return !v.Recurring && !v.CancelRequested
	}
	return false
}

func jobView(j jobs.Job) JobView {
	v := JobView{ID: j.ID, Kind: j.Kind, Key: j.Key, Lane: j.Lane, Status: string(j.Status), Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		RunAt: j.RunAt, Deadline: timePtr(j.Deadline), LastError: j.LastError, CancelRequested: j.CancelRequested, AbandonOwed: j.AbandonOwed,
		Recurring: jobs.IsPeriodic(j), Created: j.CreatedAt, Updated: j.UpdatedAt, Finished: timePtr(j.FinishedAt)}
	if json.Valid(j.Payload) {
		v.Payload = j.Payload
	}
	return v
}

// ParseAbandonOwed reads the jobs list's abandon_owed filter: "true"
// lists only the cancelled jobs whose Abandon is still owed; "" or
// "false" does not filter.
func ParseAbandonOwed(v string) (bool, error) {
	switch v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, fmt.Errorf("%w: abandon_owed %q is not true or false", ErrInvalid, Clip(v))
}

var jobStatuses = []string{string(store.JobReady), string(store.JobRunning), string(store.JobDone), string(store.JobFailed), string(store.JobCancelled)}

// ListJobs lists jobs newest first.
func (op *Operator) ListJobs(ctx context.Context, f store.JobFilter) (Page[JobView], error) {
	if f.Status != "" && !slices.Contains(jobStatuses, string(f.Status)) {
		return Page[JobView]{}, fmt.Errorf("%w: status %q is not one of %s", ErrInvalid, Clip(string(f.Status)), strings.Join(jobStatuses, ", "))
	}
	f.Limit = store.PageLimit(f.Limit)
	js, err := op.Queue.List(ctx, f)
	if err != nil {
		return Page[JobView]{}, err
	}
	views := make([]JobView, len(js))
	for i, j := range js {
		views[i] = jobView(j)
	}
	return page(views, f.Limit, func(v JobView) string { return fmt.Sprint(v.ID) }), nil
}

// ShowJob reads one job.
func (op *Operator) ShowJob(ctx context.Context, id int64) (JobView, error) {
	j, err := op.Queue.Get(ctx, id)
	if err != nil {
		return JobView{}, err
	}
	return jobView(j), nil
}

// RetryJob makes a job run now; a failed or cancelled one gets a fresh
// attempt budget.
func (op *Operator) RetryJob(ctx context.Context, id int64) (JobView, error) {
	j, err := op.Queue.RetryNow(ctx, id)
	if err != nil {
		return JobView{}, jobErr(err)
	}
	return jobView(j), nil
}

// CancelJob cancels a waiting job, or makes a running job's current
// attempt its last.
func (op *Operator) CancelJob(ctx context.Context, id int64) (JobView, error) {
	j, err := op.Queue.Cancel(ctx, id)
	if err != nil {
		return JobView{}, jobErr(err)
	}
	return jobView(j), nil
}

func jobErr(err error) error {
	if errors.Is(err, store.ErrWrongState) || errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// ---- audit ----

// AuditView is an audit row.
type AuditView struct {
	ID          int64             `json:"id"`
	At          time.Time         `json:"at"`
	Event       string            `json:"event"`
	Outcome     string            `json:"outcome"`
	Profile     string            `json:"profile,omitempty"`
	Actor       authority.Actor   `json:"actor"`
	Order       string            `json:"order,omitempty"`
	Account     string            `json:"account,omitempty"`
	Identifiers []acme.Identifier `json:"identifiers,omitempty"`
	Serial      string            `json:"serial,omitempty"`
	ClientIP    string            `json:"client_ip,omitempty"`
	ClientName  string            `json:"client_name,omitempty"`
	UserAgent   string            `json:"user_agent,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	Detail      string            `json:"detail,omitempty"`
	// AccountEABLabel is the label of the external account binding
	// Account was created with, if any.
	AccountEABLabel string `json:"account_eab_label,omitempty"`
}

var auditOutcomes = []string{authority.OutcomeSuccess, authority.OutcomeFailure, authority.OutcomeRefused, authority.OutcomeInterrupted}

// SearchAudit searches the audit trail, newest first.
func (op *Operator) SearchAudit(ctx context.Context, f store.AuditFilter) (Page[AuditView], error) {
	if f.Outcome != "" && !slices.Contains(auditOutcomes, f.Outcome) {
		return Page[AuditView]{}, fmt.Errorf("%w: outcome %q is not one of %s", ErrInvalid, Clip(f.Outcome), strings.Join(auditOutcomes, ", "))
	}
	if f.Event != "" && !slices.Contains(acme.Events, f.Event) {
		return Page[AuditView]{}, fmt.Errorf("%w: event %q is not one of %s", ErrInvalid, Clip(f.Event), strings.Join(acme.Events, ", "))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return Page[AuditView]{}, fmt.Errorf("%w: until must be after since", ErrInvalid)
	}
	if f.Serial != "" {
		serial, err := normalSerial(f.Serial)
		if err != nil {
			return Page[AuditView]{}, err
		}
		f.Serial = serial
	}
	f.Limit = store.PageLimit(f.Limit)
	evs, err := op.DB.SearchAudit(ctx, f)
	if err != nil {
		return Page[AuditView]{}, err
	}
	var accounts []string
	for _, e := range evs {
		if e.AccountID != "" && !slices.Contains(accounts, e.AccountID) {
			accounts = append(accounts, e.AccountID)
		}
	}
	labels, err := op.DB.AccountEABLabels(ctx, accounts)
	if err != nil {
		return Page[AuditView]{}, err
	}
	views := make([]AuditView, len(evs))
	for i, e := range evs {
		views[i] = AuditView{ID: e.ID, At: e.At, Event: e.Event, Outcome: e.Outcome, Profile: e.Profile,
			Actor: authority.Actor{Kind: e.ActorKind, ID: e.ActorID}, Order: e.OrderID, Account: e.AccountID, Identifiers: e.Identifiers,
			Serial: e.Serial, ClientIP: e.ClientIP, ClientName: e.ClientName, UserAgent: e.UserAgent, Reason: e.Reason, Detail: e.Detail,
			AccountEABLabel: labels[e.AccountID]}
	}
	return page(views, f.Limit, func(v AuditView) string { return fmt.Sprint(v.ID) }), nil
}

// AuditPruneView answers a prune of the audit trail.
type AuditPruneView struct {
	Before  time.Time `json:"before"`
	Deleted int64     `json:"deleted"`
}

// PruneAudit deletes the audit rows older than before, which may not lie
// in the future, and records the prune, with actor and the cutoff, in a
// row of its own that the prune keeps.
func (op *Operator) PruneAudit(ctx context.Context, before time.Time, actor authority.Actor) (AuditPruneView, error) {
	now := op.now()
	switch {
	case before.IsZero():
		return AuditPruneView{}, fmt.Errorf("%w: before (the cutoff) is required", ErrInvalid)
	case before.After(now):
		return AuditPruneView{}, fmt.Errorf("%w: before %s is in the future; a prune deletes only past rows", ErrInvalid,
			before.UTC().Format(time.RFC3339))
	}
	n, err := op.DB.PruneAudit(ctx, before, 0, op.Clock, func(n int64, stopped error) (store.AuditEvent, bool) {
		outcome, why := authority.PruneOutcome(stopped)
		return store.AuditEvent{At: now, Event: acme.EventAuditPruned, Outcome: outcome, ActorKind: actor.Kind, ActorID: actor.ID,
			Reason: "operator", Detail: fmt.Sprintf("deleted %d audit rows older than %s%s", n, before.UTC().Format(time.RFC3339), why)}, true
	})
	if err != nil {
		return AuditPruneView{Before: before, Deleted: n}, err
	}
	return AuditPruneView{Before: before.UTC(), Deleted: n}, nil
}

// ---- CRL ----

// CRLView describes a published CRL.
type CRLView struct {
	Profile    string    `json:"profile"`
	Issuer     string    `json:"issuer"`
	Number     int64     `json:"number"`
	ThisUpdate time.Time `json:"this_update"`
	NextUpdate time.Time `json:"next_update"`
	Entries    int       `json:"entries"`
}

func (op *Operator) crlServer(profile string) (*authority.Authority, error) {
	s, ok := op.Profiles.Lookup(profile)
	if !ok {
		return nil, fmt.Errorf("%w: profile %q is not mounted in this process", store.ErrNotFound, profile)
	}
	// A front end (signer delegated) serves the CRLs its workers signed
	// and published: it shows them as it serves them.
	if _, ok := s.CRLSigner(); !ok && !s.Delegates() {
		return nil, fmt.Errorf("%w: the signer of profile %s publishes no CRL", store.ErrNotFound, profile)
	}
	return s, nil
}

// ShowCRL describes the CRL a profile serves now.
func (op *Operator) ShowCRL(ctx context.Context, profile string) (CRLView, error) {
	s, err := op.crlServer(profile)
	if err != nil {
		return CRLView{}, err
	}
	crl, err := s.CurrentCRL(ctx)
	if _, isProblem := problem.As(err); errors.Is(err, authority.ErrNoCRL) || isProblem && s.Delegates() {
		// For a front end, a problem is the not-found of a profile
		// whose workers published no CRL (yet, or at all: a relay's).
		return CRLView{}, fmt.Errorf("%w: no CRL of profile %s is published: %w", store.ErrNotFound, profile, err)
	}
	if err != nil {
		return CRLView{}, err
	}
	return crlView(profile, crl), nil
}

// RegenerateCRL publishes a new CRL for a profile's CA now — in a later
// second than the stored CRL's, as a regeneration job does, waiting for
// it if need be — and audits it with actor. A front end holds no key to
// sign one with: it refuses, naming where to ask.
func (op *Operator) RegenerateCRL(ctx context.Context, profile string, actor authority.Actor) (CRLView, error) {
	s, err := op.crlServer(profile)
	if err != nil {
		return CRLView{}, err
	}
	if s.Delegates() {
		return CRLView{}, fmt.Errorf("%w: profile %s is mounted here without its signer; regenerate its CRL at an instance holding the signer", ErrConflict, profile)
	}
	crl, err := s.RegenerateCRLAfterStored(ctx, actor)
	if err != nil {
		return CRLView{}, err
	}
	return crlView(profile, crl), nil
}

func crlView(profile string, c store.CRL) CRLView {
	return CRLView{Profile: profile, Issuer: c.IssuerKeyID, Number: c.Number, ThisUpdate: c.ThisUpdate, NextUpdate: c.NextUpdate, Entries: c.Entries}
}
