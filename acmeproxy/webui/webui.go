// Package webui is the operator's web page: server-rendered pages over the
// operator layer (acmeproxy/operator), which the admin API and the CLI
// share. It holds no query of its own.
//
// Who may use it is Caddy's business: the page sits behind Caddy's
// basic_auth, forward_auth or client certificates and refuses (403) any
// request that reaches it without an authenticated user or a verified
// client certificate, unless it was told InsecureNoAuth. Every change is a
// POST carrying a CSRF token, from the page's own origin, after a
// confirmation page, audited with the authenticated user as its actor.
package webui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/internal/forwarded"
)

//go:embed templates/*.html static/*
var files embed.FS

// pageLimit is the rows of one page of a list.
const pageLimit = 50

// Security headers of every answer. The CSP allows no script at all, the
// stylesheet from this page only, and forms that post to it.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Config configures a UI.
type Config struct {
	Operator *operator.Operator
	// Prefix is the path the pages live under ("/" or "/ops"); requests
	// outside it are not the UI's.
	Prefix string
	// User says who Caddy authenticated for a request ("" for nobody):
	// the {http.auth.user.id} placeholder, or one the operator chose.
	User func(*http.Request) string
	// InsecureNoAuth serves requests that carry no authenticated user as
	// "anonymous". For a page on a loopback address only.
	InsecureNoAuth bool
	Logger         *zap.Logger
	// CSRFKey signs the forms' tokens; default a random key, which a
	// reload or another instance would not share (the Caddy module passes
	// one kept in the database).
	CSRFKey []byte
	// Mount says what path a handler in front stripped from a request
	// before the page saw it (Caddy's handle_path): "" for none, else
	// "/segment…" with no trailing slash. Links, forms and redirects put
	// it back before Prefix, so that they lead where the browser can
	// reach; which page answers is read without it. Default none.
	Mount func(*http.Request) string
}

// UI serves the pages.
type UI struct {
	cfg   Config
	base  string // Prefix with a trailing slash
	pages map[string]*template.Template
}

// New builds a UI.
func New(cfg Config) (*UI, error) {
	if cfg.Operator == nil {
		return nil, errors.New("webui: no operator")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.User == nil {
		cfg.User = func(*http.Request) string { return "" }
	}
	if cfg.Mount == nil {
		cfg.Mount = func(*http.Request) string { return "" }
	}
	if len(cfg.CSRFKey) == 0 {
		cfg.CSRFKey = make([]byte, 32)
		if _, err := rand.Read(cfg.CSRFKey); err != nil {
			return nil, fmt.Errorf("webui: csrf key: %w", err)
		}
	}
	base := "/" + strings.Trim(cfg.Prefix, "/") + "/"
	if base == "//" {
		base = "/"
	}
	u := &UI{cfg: cfg, base: base, pages: map[string]*template.Template{}}
	for _, name := range []string{"overview", "orders", "order", "revoke", "accounts", "account", "jobs", "job", "audit", "confirm", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: template %s: %w", name, err)
		}
		u.pages[name] = t
	}
	return u, nil
}

// Handles says whether a path is the UI's.
func (u *UI) Handles(path string) bool {
	return path+"/" == u.base || strings.HasPrefix(path, u.base)
}

// identity is who is asking: the user Caddy authenticated, else the
// subject of a verified client certificate, else (told so) anonymous.
func (u *UI) identity(r *http.Request) (string, bool) {
	if id := u.cfg.User(r); id != "" {
		return id, true
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		if cn := leaf.Subject.CommonName; cn != "" {
			return cn, true
		}
		return leaf.Subject.String(), true
	}
	if u.cfg.InsecureNoAuth && addressedDirectly(r.Host) {
		return "anonymous", true
	}
	return "", false
}

// addressedDirectly says whether a request's Host is an IP address or
// localhost, which no DNS answer can point elsewhere. insecure_no_auth
// serves only those: under any other name a page of an attacker's could
// have its name resolve to this server (DNS rebinding) and, being the same
// origin as far as the browser knows, pass every same-origin check.
func addressedDirectly(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = strings.ToLower(host)
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// ServeHTTP serves the pages.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on the form posts, which checkPost must then refuse
	// where no Sec-Fetch-Site comes (plain http under a non-loopback
	// name); no other origin gets a Referer either way.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	user, ok := u.identity(r)
	if !ok {
		http.Error(w, "403 Forbidden: the acme_proxy_ui page answers only requests that Caddy has authenticated "+
			"(basic_auth, forward_auth, or a verified client certificate), and this one carries no authenticated user. "+
			"Put an authentication handler in front of acme_proxy_ui, or set insecure_no_auth on a page nobody else can reach "+
			"(insecure_no_auth answers only requests addressed to an IP address or localhost).",
			http.StatusForbidden)
		return
	}
	rel := strings.Trim(strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(u.base, "/")), "/")
	if rel == "static/ui.css" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.Set("Cache-Control", "max-age=3600")
		http.ServeFileFS(w, r, files, "static/ui.css")
		return
	}
	rq := &request{ui: u, w: w, r: r, user: user, base: u.cfg.Mount(r) + u.base}
	parts := strings.Split(rel, "/")
	kind, id, action := parts[0], "", ""
	if len(parts) > 1 {
		id = parts[1]
	}
	if len(parts) > 2 {
		action = parts[2]
	}
	rt, ok := routes[routeKey{kind, id != "", action}]
	if !ok || len(parts) > 3 || (len(parts) > 1 && id == "") {
		rq.fail(http.StatusNotFound, fmt.Errorf("no page %s", operator.Clip(r.URL.Path)))
		return
	}
	if len(id) > operator.MaxID {
		rq.fail(http.StatusNotFound, fmt.Errorf("no id is %d bytes long", len(id)))
		return
	}
	if r.Method == http.MethodHead {
		r.Method = http.MethodGet
	}
	if r.Method != rt.method {
		h.Set("Allow", rt.method)
		rq.fail(http.StatusMethodNotAllowed, fmt.Errorf("%s is not allowed here; use %s", operator.Clip(r.Method), rt.method))
		return
	}
	if rt.method == http.MethodPost {
		if err := u.checkPost(r, user); err != nil {
			u.cfg.Logger.Warn("web ui: refused a POST", zap.String("event", "ui_post_refused"), zap.String("path", operator.Clip(r.URL.Path)), zap.String("user", user), zap.Error(err))
			rq.fail(http.StatusForbidden, err)
			return
		}
	}
	rt.handle(rq, id)
}

// ---- CSRF and origin ----

// csrfToken is the token of user's forms: a MAC of the user's name, so a
// token taken from one user's page is no good for another.
func (u *UI) csrfToken(user string) string {
	m := hmac.New(sha256.New, u.cfg.CSRFKey)
	m.Write([]byte("acme_proxy_ui csrf\x00" + user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

var (
	errCSRF      = errors.New("the form's CSRF token is missing or wrong; reload the page and try again")
	errCrossSite = errors.New("the form was not sent from this page's own origin")
)

// checkPost refuses a POST without the user's CSRF token, or sent from
// another origin: the browser's Sec-Fetch-Site must say same-origin, or,
// where it sends none (browsers send Sec-Fetch-* only to https and
// loopback origins), the Origin must be this page's own.
func (u *UI) checkPost(r *http.Request, user string) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "same-origin":
	case site != "":
		return fmt.Errorf("%w (Sec-Fetch-Site: %q)", errCrossSite, operator.Clip(site))
	default:
		origin := r.Header.Get("Origin")
		if origin != forwarded.Scheme(r)+"://"+r.Host {
			return fmt.Errorf("%w (Origin: %q)", errCrossSite, operator.Clip(origin))
		}
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("%w: %w", errCSRF, err)
	}
	got, want := r.PostForm.Get("csrf"), u.csrfToken(user)
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errCSRF
	}
	return nil
}

// ---- requests ----

type request struct {
	ui   *UI
	w    http.ResponseWriter
	r    *http.Request
	user string
	// base is where the browser reaches the pages: the mount a handler
	// in front stripped, then the UI's base.
	base string
}

func (rq *request) op() *operator.Operator { return rq.ui.cfg.Operator }

func (rq *request) actor() authority.Actor {
	return authority.Actor{Kind: authority.ActorWebUI, ID: rq.user}
}

// page is what every template gets.
type page struct {
	Base  string
	User  string
	CSRF  string
	Title string
	Nav   string
	Done  string
	Data  any
}

func (rq *request) render(status int, name, title string, data any) {
	p := page{Base: rq.base, User: rq.user, CSRF: rq.ui.csrfToken(rq.user), Title: title, Nav: navOf[name], Data: data,
		Done: doneText[rq.r.URL.Query().Get("done")]}
	var b strings.Builder
	if err := rq.ui.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		rq.ui.cfg.Logger.Error("web ui: rendering", zap.String("event", "ui_render_failed"), zap.String("page", name), zap.Error(err))
		http.Error(rq.w, "500 Internal Server Error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	rq.w.Header().Set("Content-Type", "text/html; charset=utf-8")
	rq.w.WriteHeader(status)
	_, _ = rq.w.Write([]byte(b.String()))
}

// fail answers an error page; an operator error gets its status, a
// server fault a generic text (the log has the cause).
func (rq *request) fail(status int, err error) {
	msg := err.Error()
	if status == 0 {
		status, msg = operator.Describe(err)
	}
	if status == 0 || status == http.StatusInternalServerError {
		status = http.StatusInternalServerError
		rq.ui.cfg.Logger.Error("web ui: request failed", zap.String("event", "ui_request_failed"), zap.String("path", operator.Clip(rq.r.URL.Path)), zap.Error(err))
		msg = "the server failed to answer; its log says why"
	}
	if status == http.StatusServiceUnavailable {
		// As the admin API's 503 says: when to load the page again.
		rq.w.Header().Set("Retry-After", strconv.Itoa(int(operator.UnavailableRetryAfter/time.Second)))
	}
	rq.render(status, "error", http.StatusText(status), struct {
		Status  int
		Message string
	}{status, msg})
}

// failed answers err's error page, as fail(0, err) does, when err is not
// nil, and says whether it did: every step of a page ends in the same
// `if rq.failed(err) { return }` instead of a four-line copy of it.
func (rq *request) failed(err error) bool {
	if err == nil {
		return false
	}
	rq.fail(0, err)
	return true
}

// done redirects after a change to a page that says what was done.
func (rq *request) done(path, what string) {
	http.Redirect(rq.w, rq.r, rq.base+path+"?done="+url.QueryEscape(what), http.StatusSeeOther)
}

var doneText = map[string]string{
	"revoked": "The certificate was revoked.",
	"revoke-queued": "The revocation is queued: the signer's backend has not confirmed it yet, and may still refuse it. " +
		"Its signer_revoke job carries it (see Jobs); this page shows the certificate revoked once it is. Revoke again to wait for it once more.",
	"key-compromise": "The revocation reason is now keyCompromise; the CRL is rebuilt with it.",
	"deactivated":    "The account was deactivated.",
	"retried":        "The job will run now.",
	"cancelled":      "The job was cancelled.",
	"cancel-requested": "The job's cancel is requested: it is running, and its current attempt is its last; " +
		"it is cancelled when that attempt ends, unless the attempt finishes the job.",
}

// ---- routes ----

type routeKey struct {
	kind   string
	hasID  bool
	action string
}

type route struct {
	method string
	handle func(rq *request, id string)
}

var routes map[routeKey]route

func init() {
	routes = map[routeKey]route{
		{"", false, ""}:                     {http.MethodGet, overview},
		{"orders", false, ""}:               {http.MethodGet, listOrders},
		{"orders", true, ""}:                {http.MethodGet, showOrder},
		{"orders", true, "chain.pem"}:       {http.MethodGet, orderChain},
		{"orders", true, "revoke"}:          {http.MethodGet, confirmRevoke},
		{"orders", true, "do-revoke"}:       {http.MethodPost, revokeOrder},
		{"accounts", false, ""}:             {http.MethodGet, listAccounts},
		{"accounts", true, ""}:              {http.MethodGet, showAccount},
		{"accounts", true, "deactivate"}:    {http.MethodGet, confirmDeactivate},
		{"accounts", true, "do-deactivate"}: {http.MethodPost, deactivateAccount},
		{"jobs", false, ""}:                 {http.MethodGet, listJobs},
		{"jobs", true, ""}:                  {http.MethodGet, showJob},
		{"jobs", true, "retry"}:             {http.MethodGet, confirmJob("retry")},
		{"jobs", true, "do-retry"}:          {http.MethodPost, jobAction("retry")},
		{"jobs", true, "cancel"}:            {http.MethodGet, confirmJob("cancel")},
		{"jobs", true, "do-cancel"}:         {http.MethodPost, jobAction("cancel")},
		{"audit", false, ""}:                {http.MethodGet, searchAudit},
	}
}

var navOf = map[string]string{"overview": "overview", "orders": "orders", "order": "orders", "revoke": "orders",
	"accounts": "accounts", "account": "accounts", "jobs": "jobs", "job": "jobs", "audit": "audit"}

// query is the request's query string.
func (rq *request) query(name string) string { return strings.TrimSpace(rq.r.URL.Query().Get(name)) }

// next is the link to the next page of a list: the same filters, the
// cursor in param.
func (rq *request) next(param, cursor string) string {
	if cursor == "" {
		return ""
	}
	q := rq.r.URL.Query()
	q.Del("done")
	q.Set(param, cursor)
	return "?" + q.Encode()
}

func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s %q is not a time (2006-01-02T15:04 or RFC 3339, UTC)", operator.ErrInvalid, name, operator.Clip(v))
}

// parseID reads a positive id; what names the value in the message
// ("job id", "before").
func parseID(what, id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %s %q is not a positive number", operator.ErrInvalid, what, operator.Clip(id))
	}
	return n, nil
}
