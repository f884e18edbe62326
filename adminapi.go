package caddyacmeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// adminBase is where the operator routes live on Caddy's admin endpoint.
const adminBase = "/acme_proxy/"

// Headers the CLI sets so the audit trail says who revoked.
const (
	actorHeader    = "X-Acme-Proxy-Actor"    // "cli"; anything else is the admin API
	operatorHeader = "X-Acme-Proxy-Operator" // the operator's name, free text
)

// AdminAPI is admin.api.acme_proxy: the operator's routes under
// /acme_proxy/ on Caddy's admin endpoint. It parses requests and writes
// answers; operator.Operator does the work.
type AdminAPI struct {
	app *App
	log *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (*AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.acme_proxy", New: func() caddy.Module { return new(AdminAPI) }}
}

// Provision finds the acme_proxy app, when the config names one (else see
// appOf).
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.log = ctx.Logger(a)
	app, err := ctx.AppIfConfigured("acme_proxy")
	if err == nil {
		a.app = app.(*App)
	}
	return nil
}

// Routes returns the admin routes.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: adminBase, Handler: caddy.AdminHandlerFunc(a.serve)}}
}

// adminRoute is one operator route: its methods and handler.
type adminRoute struct {
	method string
	handle func(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error
}

// route finds the route of a path below adminBase, and the id in it.
func (a *AdminAPI) route(rel string) (adminRoute, string, bool) {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	kind, id, action := parts[0], "", ""
	if len(parts) > 1 {
		id = parts[1]
	}
	if len(parts) > 2 {
		action = parts[2]
	}
	if len(parts) > 3 || (len(parts) > 1 && id == "") {
		return adminRoute{}, "", false
	}
	if kind == "audit" && id == "prune" && action == "" {
		// A fixed word where other routes have an id: audit rows have none.
		return adminRoute{http.MethodPost, a.pruneAudit}, "", true
	}
	if kind == "eab" && id == "create" && action == "" {
		// Likewise: minting names no key yet.
		return adminRoute{http.MethodPost, a.createEABKey}, "", true
	}
	type key struct {
		kind   string
		hasID  bool
		action string
	}
	routes := map[key]adminRoute{
		{"profiles", false, ""}:          {http.MethodGet, a.listProfiles},
		{"orders", false, ""}:            {http.MethodGet, a.listOrders},
		{"orders", true, ""}:             {http.MethodGet, a.showOrder},
		{"orders", true, "revoke"}:       {http.MethodPost, a.revokeOrder},
		{"accounts", false, ""}:          {http.MethodGet, a.listAccounts},
		{"accounts", true, ""}:           {http.MethodGet, a.showAccount},
		{"accounts", true, "deactivate"}: {http.MethodPost, a.deactivateAccount},
		{"jobs", false, ""}:              {http.MethodGet, a.listJobs},
		{"jobs", true, ""}:               {http.MethodGet, a.showJob},
		{"jobs", true, "retry"}:          {http.MethodPost, a.retryJob},
		{"jobs", true, "cancel"}:         {http.MethodPost, a.cancelJob},
		{"audit", false, ""}:             {http.MethodGet, a.searchAudit},
		{"crl", true, ""}:                {http.MethodGet, a.showCRL},
		{"crl", true, "regenerate"}:      {http.MethodPost, a.regenerateCRL},
		{"eab", false, ""}:               {http.MethodGet, a.listEABKeys},
		{"eab", true, "revoke"}:          {http.MethodPost, a.revokeEABKey},
		{"renew-early", false, ""}:       {http.MethodPost, a.renewEarly},
	}
	rt, ok := routes[key{kind, id != "", action}]
	return rt, id, ok
}

func (a *AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	rt, id, ok := a.route(strings.TrimPrefix(r.URL.Path, adminBase))
	if !ok {
		return apiError(http.StatusNotFound, fmt.Errorf("no acme_proxy admin route %s", operator.Clip(r.URL.Path)))
	}
	if len(id) > operator.MaxID {
		// No id is that long; answering without echoing it keeps a
		// megabyte of path out of the answer and the log.
		return apiError(http.StatusNotFound, fmt.Errorf("not found: no id is %d bytes long", len(id)))
	}
	if r.Method != rt.method {
		w.Header().Set("Allow", rt.method)
		return apiError(http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed on %s; use %s",
			operator.Clip(r.Method), operator.Clip(r.URL.Path), rt.method))
	}
	err := a.serveWith(w, r, rt, id)
	if ae, ok := errors.AsType[caddy.APIError](err); ok && ae.HTTPStatus == http.StatusServiceUnavailable {
		// As the ACME front says when the database is out of reach: a
		// script or the CLI may ask again then. So too with no app to
		// serve (a reload under way, or one that failed before any app
		// started).
		w.Header().Set("Retry-After", strconv.Itoa(int(operator.UnavailableRetryAfter/time.Second)))
	}
	return err
}

// serveWith serves rt, found for r, with the app serving now.
func (a *AdminAPI) serveWith(w http.ResponseWriter, r *http.Request, rt adminRoute, id string) error {
	app := a.appOf()
	if app == nil || app.db == nil {
		return apiError(http.StatusServiceUnavailable, errNoApp)
	}
	// As an ACME request is, an operator's is bounded, so that a database
	// that does not answer is a 503 rather than a hung CLI.
	ctx, cancel := context.WithTimeout(r.Context(), operator.RequestDeadline)
	defer cancel()
	// An app provisioned and not started yet opens its store at Start:
	// wait for it (the store answers 503 if it never opens).
	app.awaitStart(ctx)
	return rt.handle(w, r.WithContext(ctx), app.Operator(), id)
}

// appOf is the app the routes work on: the config's, or, when the config
// does not name it (a Caddyfile with the acme_proxy directive and no
// global acme_proxy option, as the quickstart), the one its handlers
// pulled in, once started; and when the config's load failed (Caddy keeps
// the admin API it installed for it), the app still serving.
func (a *AdminAPI) appOf() *App {
	if a.app != nil && !a.app.retired.Load() {
		return a.app
	}
	return started.newest()
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "whole number"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return t.String()
}

// adminBodyMax bounds the body of an admin request: its JSON is a few
// fields (renew-early's, lists of serials and orders, has a bound of its
// own).
const adminBodyMax = 64 << 10

// readJSONBody decodes r's body into v: one JSON value of shape (named in
// the error), its known fields only, nothing after it, at most max bytes —
// a body cut at the limit or followed by more is refused (413, 400), not
// read as far as it goes, so that no request is acted on with a part of
// what it said. With optional, an empty body leaves v as it is.
func readJSONBody(r *http.Request, max int64, optional bool, v any, shape string) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return apiError(http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
	}
	if int64(len(body)) > max {
		return apiError(http.StatusRequestEntityTooLarge, fmt.Errorf("the body is larger than %d bytes", max))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return apiError(http.StatusBadRequest, fmt.Errorf("the body is empty; it must be %s", shape))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			// Say what was wrong in the body's terms: encoding/json's text
			// names the Go struct and type it decodes into. Its Value
			// quotes a number whole, by its start here.
			if te.Field != "" {
				err = fmt.Errorf("%q is a JSON %s, not a %s", te.Field, operator.Clip(te.Value), jsonKind(te.Type))
			} else {
				err = fmt.Errorf("it is a JSON %s", operator.Clip(te.Value))
			}
		} else if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			// Quoted by its start: the name is the client's.
			err = fmt.Errorf("unknown field %s", operator.Clip(field))
		}
		return apiError(http.StatusBadRequest, fmt.Errorf("the body must be %s: %w", shape, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return apiError(http.StatusBadRequest, fmt.Errorf("the body must be %s, with nothing after it", shape))
	}
	return nil
}

// readNoInput refuses what a route that takes nothing was sent: a query
// parameter, or a body other than nothing or {} — a client sending one
// means something the route would not do, so it is not acted on.
func readNoInput(r *http.Request) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	return readJSONBody(r, 1<<10, true, &struct{}{}, "empty or {} (this route takes no fields)")
}

func apiError(status int, err error) error {
	return caddy.APIError{HTTPStatus: status, Err: err, Message: err.Error()}
}

// opError turns an operator error into the API error with its status.
func opError(err error) error {
	if status, msg := operator.Describe(err); status != 0 {
		return caddy.APIError{HTTPStatus: status, Err: err, Message: msg}
	}
	return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err,
		Message: "the operation failed; Caddy's log has the cause"}
}

func writeAdminJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		return opError(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
	return nil
}

// query reads a request's query parameters, refusing any not in allowed.
type query struct {
	v   url.Values
	err error
}

func readQuery(r *http.Request, allowed ...string) *query {
	q := &query{v: r.URL.Query()}
	// r.URL.Query drops a pair it cannot decode (a bad escape, a
	// semicolon); refuse it rather than answer as if it were not given.
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if _, err := url.ParseQuery(pair); err != nil {
			name, _, _ := strings.Cut(pair, "=")
			q.err = fmt.Errorf("parameter %q is malformed: %w", operator.Clip(name), err)
		}
	}
	for k, vs := range q.v {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				q.err = fmt.Errorf("unknown parameter %q (this route takes none)", operator.Clip(k))
			} else {
				q.err = fmt.Errorf("unknown parameter %q (this route takes %s)", operator.Clip(k), strings.Join(allowed, ", "))
			}
		} else if len(vs) > 1 {
			q.err = fmt.Errorf("parameter %q given %d times", k, len(vs))
		}
	}
	return q
}

func (q *query) str(name string) string { return q.v.Get(name) }

func (q *query) int(name string, lo, hi int) int {
	s := q.v.Get(name)
	if s == "" || q.err != nil {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		q.err = fmt.Errorf("parameter %s: %q is not a whole number from %d to %d", name, operator.Clip(s), lo, hi)
	}
	return n
}

func (q *query) time(name string) time.Time {
	s := q.v.Get(name)
	if s == "" || q.err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		q.err = fmt.Errorf("parameter %s: %q is not an RFC 3339 time", name, operator.Clip(s))
	}
	return t
}

func (q *query) check() error {
	if q.err != nil {
		return apiError(http.StatusBadRequest, q.err)
	}
	return nil
}

// operatorNameMax bounds the operator's name an audit row keeps, in bytes.
const operatorNameMax = 64

// actorOf says who is asking, for the audit trail.
func actorOf(r *http.Request) authority.Actor {
	kind := authority.ActorAdmin
	if r.Header.Get(actorHeader) == authority.ActorCLI {
		kind = authority.ActorCLI
	}
	id := strings.ToValidUTF8(r.Header.Get(operatorHeader), "\uFFFD")
	if len(id) > operatorNameMax {
		// Cut at a character's start, so that a name of more than one
		// byte a character is not left with half of one.
		cut := operatorNameMax
		for cut > 0 && !utf8.RuneStart(id[cut]) {
			cut--
		}
		id = id[:cut]
	}
	if id == "" {
		id = r.RemoteAddr
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			id = host
		}
	}
	return authority.Actor{Kind: kind, ID: id}
}

func jobID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0, apiError(http.StatusBadRequest, fmt.Errorf("job id %q is not a positive whole number", id))
	}
	return n, nil
}

// ---- handlers ----

func (a *AdminAPI) listProfiles(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	profiles, err := op.ListProfiles(r.Context())
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, profiles)
}

func (a *AdminAPI) listOrders(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	q := readQuery(r, operator.OrderFilters...)
	f := store.OrderFilter{Profile: q.str("profile"), Status: acme.Status(q.str("status")), Identifier: q.str("identifier"),
		AccountID: q.str("account"), Serial: q.str("serial"), Since: q.time("since"), After: q.str("after"), Limit: q.int("limit", 1, store.MaxPage)}
	if err := q.check(); err != nil {
		return err
	}
	p, err := op.ListOrders(r.Context(), f)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, p)
}

func (a *AdminAPI) showOrder(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	o, err := op.ShowOrder(r.Context(), id)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, o)
}

// revokeRequest is the body of POST /acme_proxy/orders/{id}/revoke.
type revokeRequest struct {
	Reason *int `json:"reason"`
}

// revokeResponse answers a revocation.
type revokeResponse struct {
	Order       string                    `json:"order"`
	Status      string                    `json:"status"` // revoked or queued
	Job         int64                     `json:"job,omitempty"`
	RetryAfter  int                       `json:"retry_after,omitempty"` // seconds, when queued
	Certificate *operator.CertificateView `json:"certificate,omitempty"`
}

func (a *AdminAPI) revokeOrder(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	var req revokeRequest
	if err := readJSONBody(r, adminBodyMax, true, &req, `{"reason": <RFC 5280 code>}`); err != nil {
		return err
	}
	res, err := op.RevokeOrder(r.Context(), id, req.Reason, actorOf(r))
	if err != nil {
		return opError(err)
	}
	if res.Queued {
		secs := int(res.RetryAfter / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		return writeAdminJSON(w, http.StatusAccepted, revokeResponse{Order: id, Status: "queued", Job: res.Job, RetryAfter: secs})
	}
	c := res.Certificate
	revokedAt := c.RevokedAt
	return writeAdminJSON(w, http.StatusOK, revokeResponse{Order: id, Status: "revoked", Job: res.Job,
		Certificate: &operator.CertificateView{ID: c.ID, Serial: c.Serial, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
			RevokedAt: &revokedAt, Reason: c.Reason}})
}

func (a *AdminAPI) listAccounts(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	q := readQuery(r, operator.AccountFilters...)
	f := store.AccountFilter{Profile: q.str("profile"), Status: acme.Status(q.str("status")), After: q.str("after"), Limit: q.int("limit", 1, store.MaxPage)}
	if err := q.check(); err != nil {
		return err
	}
	p, err := op.ListAccounts(r.Context(), f)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, p)
}

func (a *AdminAPI) showAccount(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	acct, err := op.ShowAccount(r.Context(), id)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, acct)
}

func (a *AdminAPI) deactivateAccount(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	if err := readNoInput(r); err != nil {
		return err
	}
	acct, err := op.DeactivateAccount(r.Context(), id, actorOf(r))
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, acct)
}

func (a *AdminAPI) listJobs(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	q := readQuery(r, operator.JobFilters...)
	f := store.JobFilter{Kind: q.str("kind"), Status: store.JobStatus(q.str("status")), Key: q.str("key"),
		BeforeID: int64(q.int("before", 1, 1<<62)), Limit: q.int("limit", 1, store.MaxPage)}
	if err := q.check(); err != nil {
		return err
	}
	owed, err := operator.ParseAbandonOwed(q.str("abandon_owed"))
	if err != nil {
		return opError(err)
	}
	f.AbandonOwed = owed
	p, err := op.ListJobs(r.Context(), f)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, p)
}

func (a *AdminAPI) showJob(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	return a.jobOp(w, r, id, op.ShowJob)
}

func (a *AdminAPI) retryJob(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	return a.jobOp(w, r, id, func(ctx context.Context, n int64) (operator.JobView, error) { return op.RetryJobAs(ctx, n, actorOf(r)) })
}

func (a *AdminAPI) cancelJob(w http.ResponseWriter, r *http.Request, op *operator.Operator, id string) error {
	return a.jobOp(w, r, id, func(ctx context.Context, n int64) (operator.JobView, error) {
		return op.CancelJobAs(ctx, n, actorOf(r))
	})
}

func (a *AdminAPI) jobOp(w http.ResponseWriter, r *http.Request, id string,
	do func(context.Context, int64) (operator.JobView, error)) error {
	if err := readNoInput(r); err != nil {
		return err
	}
	n, err := jobID(id)
	if err != nil {
		return err
	}
	j, err := do(r.Context(), n)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, j)
}

func (a *AdminAPI) searchAudit(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	q := readQuery(r, operator.AuditFilters...)
	f := store.AuditFilter{Profile: q.str("profile"), Event: q.str("event"), Outcome: q.str("outcome"), OrderID: q.str("order"),
		AccountID: q.str("account"), Serial: q.str("serial"), Since: q.time("since"), Until: q.time("until"),
		BeforeID: int64(q.int("before", 1, 1<<62)), Limit: q.int("limit", 1, store.MaxPage)}
	if err := q.check(); err != nil {
		return err
	}
	p, err := op.SearchAudit(r.Context(), f)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, p)
}

// pruneAudit deletes the audit rows older than ?before= (RFC 3339) and
// answers how many; the prune is itself audited, with the operator.
func (a *AdminAPI) pruneAudit(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	q := readQuery(r, "before")
	before := q.time("before")
	if err := q.check(); err != nil {
		return err
	}
	// The cutoff is the query's: a body (a cutoff written there too)
	// would say something the prune does not do.
	if err := readJSONBody(r, 1<<10, true, &struct{}{}, "empty or {} (this route takes its cutoff from the query's before)"); err != nil {
		return err
	}
	v, err := op.PruneAudit(r.Context(), before, actorOf(r))
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, v)
}

func (a *AdminAPI) showCRL(w http.ResponseWriter, r *http.Request, op *operator.Operator, profile string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	v, err := op.ShowCRL(r.Context(), profile)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, v)
}

func (a *AdminAPI) regenerateCRL(w http.ResponseWriter, r *http.Request, op *operator.Operator, profile string) error {
	if err := readNoInput(r); err != nil {
		return err
	}
	v, err := op.RegenerateCRL(r.Context(), profile, actorOf(r))
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, v)
}

// Interface guards
var (
	_ caddy.AdminRouter = (*AdminAPI)(nil)
	_ caddy.Provisioner = (*AdminAPI)(nil)
)

// eabCreateRequest is the body of POST eab/create.
type eabCreateRequest struct {
	Profile  string `json:"profile"`
	Label    string `json:"label"`
	Reusable bool   `json:"reusable,omitempty"`
	// Expires is the key's lifetime in Caddy's duration syntax ("7d",
	// "12h"); empty for none.
	Expires string `json:"expires,omitempty"`
}

func (a *AdminAPI) createEABKey(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	if err := readQuery(r).check(); err != nil {
		return err
	}
	var req eabCreateRequest
	if err := readJSONBody(r, adminBodyMax, false, &req, `{"profile": …, "label": …, "reusable": bool, "expires": "7d"}`); err != nil {
		return err
	}
	var ttl time.Duration
	if req.Expires != "" {
		var err error
		if ttl, err = caddy.ParseDuration(req.Expires); err != nil || ttl <= 0 {
			return apiError(http.StatusBadRequest, fmt.Errorf("expires: %q is not a positive duration such as 7d or 12h", operator.Clip(req.Expires)))
		}
	}
	k, err := op.CreateEABKey(r.Context(), req.Profile, req.Label, req.Reusable, ttl, actorOf(r))
	if err != nil {
		return opError(err)
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeAdminJSON(w, http.StatusCreated, k)
}

func (a *AdminAPI) listEABKeys(w http.ResponseWriter, r *http.Request, op *operator.Operator, _ string) error {
	q := readQuery(r, operator.EABFilters...)
	f := store.EABKeyFilter{Profile: q.str("profile"), After: q.str("after"), Limit: q.int("limit", 1, store.MaxPage)}
	if err := q.check(); err != nil {
		return err
	}
	p, err := op.ListEABKeys(r.Context(), f)
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, p)
}

func (a *AdminAPI) revokeEABKey(w http.ResponseWriter, r *http.Request, op *operator.Operator, kid string) error {
	if err := readNoInput(r); err != nil {
		return err
	}
	k, err := op.RevokeEABKey(r.Context(), kid, actorOf(r))
	if err != nil {
		return opError(err)
	}
	return writeAdminJSON(w, http.StatusOK, k)
}
