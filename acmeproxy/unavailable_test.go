package acmeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestAFullDatabaseIsAnswered503WithRetryAfterAndLoggedOncePerInterval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A database bounded a little above its empty size: room to set up,
	// then full, as a full disk leaves it.
	path := filepath.Join(t.TempDir(), "acme.db")
	empty, err := store.OpenSQLite(ctx, path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	fake := clocktest.New(time.Now())
	e := newTestEnvWith(t, envOptions{
		dbPath: path,
		sqlite: store.SQLiteOptions{MaxPages: int(fi.Size()/4096) + 64},
		opts:   func(o *Options) { o.Logger = zap.New(core); o.Clock = fake },
	})
	c := e.client(ctx)
	raw := e.raw(c)
	// Rows of shrinking size fill the last pages' corners too.
	for _, size := range []int{2000, 200, 1} {
		filler := strings.Repeat("x", size)
		for {
			err := e.db.InsertAudit(ctx, store.AuditEvent{At: time.Now(), Event: "filler", Outcome: "success", Detail: filler})
			if errors.Is(err, store.ErrUnavailable) {
				break
			}
			if err != nil {
				t.Fatalf("filling the database: %v", err)
			}
		}
	}

	// An order of fifty names needs far more room than the corners of
	// the pages the tables already have.
	var idents []map[string]string
	for i := range 50 {
		idents = append(idents, map[string]string{"type": "dns", "value": fmt.Sprintf("n%d.full.example.com", i)})
	}
	newOrder := func() rawResponse {
		return raw.post(e.url("/new-order"), map[string]any{"identifiers": idents}, jwsOpts{})
	}
	const burst = 20
	for i := range burst {
		r := newOrder()
		if r.status != http.StatusServiceUnavailable || r.problem == nil || r.problem.Type != acme.ErrorServerInternal {
			t.Fatalf("request %d to a full database: %d %s; want 503 serverInternal", i, r.status, r.body)
		}
		if got := r.header.Get("Retry-After"); got != "30" {
			t.Fatalf("request %d: Retry-After %q; want 30", i, got)
		}
	}
	lines := logs.FilterField(zap.String("event", "store_unavailable")).All()
	if len(lines) != 1 {
		t.Fatalf("%d store_unavailable log lines for %d requests; want 1", len(lines), burst)
	}
	if n := logs.FilterField(zap.String("event", "acme_request_failed")).Len(); n != 0 {
		t.Errorf("%d acme_request_failed lines besides; want none", n)
	}

	fake.Advance(storeLogEvery + time.Second)
	if r := newOrder(); r.status != http.StatusServiceUnavailable {
		t.Fatalf("after the interval: %d %s; want 503", r.status, r.body)
	}
	lines = logs.FilterField(zap.String("event", "store_unavailable")).All()
	if len(lines) != 2 {
		t.Fatalf("%d store_unavailable lines after the interval; want 2", len(lines))
	}
	if got := lines[1].ContextMap()["requests"]; got != int64(burst) {
		t.Errorf("the second line speaks for %v requests; want %d (the %d silent ones and this one)", got, burst, burst-1)
	}

	// Three more within the interval, silent; then room again: the first
	// request that goes through logs the end, speaking for those three,
	// rather than leaving them to the next outage's first line.
	for range 3 {
		newOrder()
	}
	if _, err := e.db.PruneAudit(ctx, time.Now().Add(time.Hour), 10000, nil, func(int64, error) (store.AuditEvent, bool) { return store.AuditEvent{}, false }); err != nil {
		t.Fatalf("making room: %v", err)
	}
	if r := raw.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("room.example.com")}}, jwsOpts{}); r.status != http.StatusCreated {
		t.Fatalf("a new order once there is room: %d %s", r.status, r.body)
	}
	back := logs.FilterField(zap.String("event", "store_available")).All()
	if len(back) != 1 || back[0].ContextMap()["requests"] != int64(3) {
		t.Fatalf("store_available lines %+v; want one speaking for the 3 requests not yet logged", back)
	}
}

// A database that stops answering — a hung server, a path that drops every
// packet: connections stay open and nothing comes back — turns each ACME
// request into a 503 with Retry-After once the request's deadline passes,
// not a hang; once the database answers again, so does the server.
func TestARequestToADatabaseThatDoesNotAnswerIs503AtItsDeadline(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.RequestDeadline = 2 * time.Second }})
		alice := e.rawClient()
		alice.register()
		newOrder := func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("hung.example.com")}}, jwsOpts{})
		}
		thaw := pgtest.Freeze(t)
		answered := make(chan rawResponse, 1)
		go func() { answered <- newOrder() }()
		var r rawResponse
		select {
		case r = <-answered:
		case <-time.After(20 * time.Second): // ten times the deadline
			t.Fatal("no answer while the database was frozen: the request hangs")
		}
		thaw()
		wantProblem(t, r, http.StatusServiceUnavailable, acme.ErrorServerInternal)
		if got := r.header.Get("Retry-After"); got != "30" {
			t.Errorf("Retry-After %q; want 30", got)
		}
		if r := newOrder(); r.status != http.StatusCreated {
			t.Errorf("a new order once the database answers again: %d %s", r.status, r.body)
		}
	})
}
