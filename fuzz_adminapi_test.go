package caddyacmeproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// adminListRoutes are the admin API's list routes with the query
// parameters each documents (README, "Operate it"): the filters, and the
// paging parameters limit and after or before.
var adminListRoutes = []struct {
	path   string
	params []string
}{
	{"profiles", nil},
	{"orders", []string{"profile", "status", "identifier", "account", "serial", "since", "after", "limit"}},
	{"accounts", []string{"profile", "status", "after", "limit"}},
	{"jobs", []string{"kind", "status", "key", "abandon_owed", "before", "limit"}},
	{"audit", []string{"profile", "event", "outcome", "order", "account", "serial", "since", "until", "before", "limit"}},
}

// Page sizes of the list routes: the default, and the most one page holds.
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// FuzzAdminListQuery sends GET requests with any query string to the admin
// API's list routes, over a store holding a few rows of each kind, and
// checks the contract an operator (and the CLI) relies on:
//
//   - it never panics, and never answers 5xx: a query string is the
//     caller's, so whatever is wrong with it is a 400;
//   - a refused query is a caddy.APIError with status 400 whose message
//     names one of the query's parameters;
//   - an accepted query is one the route understands in full: it parses
//     (url.Values silently drops a pair it cannot decode, which must not
//     turn a filter into no filter), every parameter is one the route
//     documents, given once, limit is a whole number from 1 to 1000,
//     before a positive whole number, since and until RFC 3339 times,
//     abandon_owed true or false;
//   - an accepted page holds at most limit items (default 100).
func FuzzAdminListQuery(f *testing.F) {
	for _, seed := range []struct {
		route uint8
		query string
	}{
		{0, ""}, {0, "x=1"},
		{1, ""}, {1, "limit=1"}, {1, "limit=1000"}, {1, "limit=1001"}, {1, "limit=0"}, {1, "limit=-1"}, {1, "limit=1e3"},
		{1, "status=valid&profile=p&identifier=A.EXAMPLE.com.&account=x&after=y"}, {1, "status=bogus"}, {1, "since=2020-01-01T00:00:00Z"}, {1, "since=yesterday"},
		{1, "status=valid&status=invalid"}, {1, "limit="}, {1, "limit=%31"}, {1, "limit=5%"}, {1, "status=valid%zz"},
		{1, "limit=5;profile=p"}, {1, "%zz=1"},
		{2, "limit=2"}, {2, "status=deactivated&after=z"}, {2, "status=pending"}, {2, "before=3"},
		{3, "limit=2"}, {3, "limit=2&before=3"}, {3, "before=0"}, {3, "before=4611686018427387904"}, {3, "before=4611686018427387905"},
		{3, "status=ready&kind=fuzz&key=k1"}, {3, "status=nope"}, {3, "limit=1001"}, {3, "after=1"},
		{3, "abandon_owed=true"}, {3, "abandon_owed=false&status=cancelled"}, {3, "abandon_owed=yes"},
		{4, "since=2020-01-01T00:00:00Z&until=2030-01-01T00:00:00Z&limit=2"}, {4, "since=yesterday"},
		{4, "since=2030-01-01T00:00:00Z&until=2020-01-01T00:00:00Z"}, {4, "until=2020-01-01T00:00:00+25:00"},
		{4, "outcome=success&event=e&order=o&account=a&serial=ABCDEF&profile=p&before=10"}, {4, "outcome=maybe"},
		{4, "limit=99999999999999999999"},
	} {
		f.Add(seed.route, seed.query)
	}

	a := fuzzAdminAPI(f)
	f.Fuzz(func(t *testing.T, route uint8, rawQuery string) {
		rt := adminListRoutes[int(route)%len(adminListRoutes)]
		path := adminBase + rt.path
		// The request as Caddy's admin server reads it off the wire; a
		// query string no HTTP request carries is not an input.
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
			"GET " + path + "?" + rawQuery + " HTTP/1.1\r\nHost: localhost\r\n\r\n")))
		if err != nil || req.URL.Path != path || req.URL.RawQuery != rawQuery {
			t.Skip("not a request line")
		}
		rec := httptest.NewRecorder()
		err = a.serve(rec, req)

		values, parseErr := url.ParseQuery(rawQuery)
		if err != nil {
			var apiErr caddy.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("?%s: error %v is not a caddy.APIError", rawQuery, err)
			}
			if apiErr.HTTPStatus != http.StatusBadRequest {
				t.Fatalf("?%s: status %d (%v); a bad query is a 400", rawQuery, apiErr.HTTPStatus, err)
			}
			if !namesAParameter(apiErr.Message, rawQuery) {
				t.Fatalf("?%s: message %q names none of the query's parameters", rawQuery, apiErr.Message)
			}
			return
		}

		if rec.Code != http.StatusOK {
			t.Fatalf("?%s: status %d without an error", rawQuery, rec.Code)
		}
		if parseErr != nil {
			t.Fatalf("?%s: accepted a query that does not parse (%v)", rawQuery, parseErr)
		}
		for k, vs := range values {
			if !slices.Contains(rt.params, k) {
				t.Fatalf("?%s: accepted parameter %q, which %s does not take", rawQuery, k, rt.path)
			}
			if len(vs) > 1 {
				t.Fatalf("?%s: accepted parameter %q given %d times", rawQuery, k, len(vs))
			}
		}
		limit := defaultPageLimit
		if s := values.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > maxPageLimit {
				t.Fatalf("?%s: accepted limit %q, not a whole number from 1 to %d", rawQuery, s, maxPageLimit)
			}
			limit = n
		}
		if s := values.Get("before"); s != "" {
			if n, err := strconv.ParseInt(s, 10, 64); err != nil || n < 1 {
				t.Fatalf("?%s: accepted before %q, not a positive whole number", rawQuery, s)
			}
		}
		if s := values.Get("abandon_owed"); s != "" && s != "true" && s != "false" {
			t.Fatalf("?%s: accepted abandon_owed %q, neither true nor false", rawQuery, s)
		}
		for _, k := range []string{"since", "until"} {
			if s := values.Get(k); s != "" {
				if _, err := time.Parse(time.RFC3339, s); err != nil {
					t.Fatalf("?%s: accepted %s %q, not an RFC 3339 time", rawQuery, k, s)
				}
			}
		}
		if rt.path == "profiles" {
			var list []json.RawMessage
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
				t.Fatalf("?%s: the answer is not a JSON list: %v", rawQuery, err)
			}
			return
		}
		var page struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || page.Items == nil {
			t.Fatalf("?%s: the answer is not a page: %v\n%s", rawQuery, err, rec.Body)
		}
		if len(page.Items) > limit {
			t.Fatalf("?%s: a page of %d items; the limit is %d", rawQuery, len(page.Items), limit)
		}
	})
}

// namesAParameter reports whether msg names one of the parameters of the
// query string raw, as written or as Go quotes it.
func namesAParameter(msg, raw string) bool {
	for pair := range strings.SplitSeq(raw, "&") {
		k, _, _ := strings.Cut(pair, "=")
		// A long name is quoted by its start (operator.Clip): as written
		// when it does not decode, else decoded.
		names := []string{k, strconv.Quote(k), strconv.Quote(operator.Clip(k))}
		if u, err := url.QueryUnescape(k); err == nil {
			names = append(names, u, strconv.Quote(u), strconv.Quote(operator.Clip(u)))
		}
		for _, n := range names {
			if n != "" && strings.Contains(msg, n) {
				return true
			}
		}
	}
	return false
}

// fuzzAdminAPI is the admin API over a store in a temporary directory with
// three accounts, orders, jobs and audit events, more than the smallest
// page holds.
func fuzzAdminAPI(f testing.TB) *AdminAPI {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(f.TempDir(), "admin.db"), store.SQLiteOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	queue := jobs.NewQueue(db, nil)
	for i := range 3 {
		acct, _, err := db.CreateAccount(ctx, store.Account{Profile: "p", Thumbprint: fmt.Sprint("thumb-", i),
			KeyJWK: []byte(`{}`)}, now.Add(time.Duration(i)*time.Minute))
		if err != nil {
			f.Fatal(err)
		}
		if _, err := db.CreateOrder(ctx, store.Order{Profile: "p", AccountID: acct.ID,
			Identifiers: []acme.Identifier{{Type: "dns", Value: "a.example.com"}}, Expires: now.Add(time.Hour)},
			nil, now.Add(time.Duration(i)*time.Minute)); err != nil {
			f.Fatal(err)
		}
		if _, _, err := queue.Enqueue(ctx, jobs.Spec{Kind: "fuzz", Key: fmt.Sprint("k", i)}); err != nil {
			f.Fatal(err)
		}
		if err := db.InsertAudit(ctx, store.AuditEvent{At: now.Add(time.Duration(i) * time.Minute), Event: "e",
			Outcome: "success", Profile: "p", ActorKind: "system"}); err != nil {
			f.Fatal(err)
		}
	}
	return &AdminAPI{app: startedApp(db, queue), log: zap.NewNop()}
}

// startedApp is an app over db whose Start has run: its store open, its
// requests not waiting for it (App.awaitStart).
func startedApp(db *store.DB, queue *jobs.Queue) *App {
	app := &App{db: db, queue: queue, profiles: map[string]*acmeproxy.Server{}, ready: newStartGate()}
	app.ready.open(true)
	return app
}

// A 503 (the database out of reach, or slower than the request's
// deadline) says when to ask again, as the ACME front's does.
func TestAnAdminRequestTheDatabaseCannotAnswerIsA503WithRetryAfter(t *testing.T) {
	a := fuzzAdminAPI(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	r := httptest.NewRequest(http.MethodGet, "/acme_proxy/orders", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	err := a.serve(w, r)
	ae, ok := errors.AsType[caddy.APIError](err)
	if !ok || ae.HTTPStatus != http.StatusServiceUnavailable {
		t.Fatalf("serve: %v; want a 503", err)
	}
	if got := w.Header().Get("Retry-After"); got != "30" {
		t.Errorf("Retry-After %q; want 30", got)
	}
}
