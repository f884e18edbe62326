package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// adminServer serves the admin API over db as Caddy's admin endpoint
// would, an error as its JSON {"error": …}.
func adminServer(t *testing.T, db *store.DB) *httptest.Server {
	t.Helper()
	a := &AdminAPI{app: startedApp(db, jobs.NewQueue(db, nil)), log: zap.NewNop()}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.serve(w, r); err != nil {
			var ae caddy.APIError
			if !errors.As(err, &ae) {
				ae = caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ae.HTTPStatus)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": ae.Err.Error()})
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

// An operator's renew-early is audited even when it selects no
// certificate — a typo in a serial, a CA whose certificates have all
// expired — as a prune that deleted nothing is: one renew_early row by
// that operator saying what was asked for and that nothing matched, from
// the CLI and the admin API alike. A request refused as malformed
// changes nothing and is no such row.
func TestARenewEarlyThatMatchesNothingIsAuditedOnceSayingWhatWasAsked(t *testing.T) {
	ctx := context.Background()
	dialects := []struct {
		name string
		open func(t *testing.T) (*store.DB, error)
	}{
		{"sqlite", func(t *testing.T) (*store.DB, error) {
			return store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
		}},
		{"postgres", func(t *testing.T) (*store.DB, error) {
			return store.OpenPostgres(ctx, pgtest.DSN(t), store.PostgresOptions{})
		}},
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			db, err := d.open(t)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ts := adminServer(t, db)
			post := func(body, operatorName string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, ts.URL+adminBase+"renew-early", strings.NewReader(body))
				req.Header.Set(operatorHeader, operatorName)
				resp, err := ts.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}

			out, err := runCLI("renew-early", "--address", ts.Listener.Addr().String(), "--serial", "0A:1B:2C", "--json")
			if err != nil {
				t.Fatalf("renew-early --serial 0A:1B:2C: %v\n%s", err, out)
			}
			var v operator.RenewEarlyView
			if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Certificates) != 0 {
				t.Fatalf("renew-early of an unknown serial answered %s (%v); want no certificate", out, err)
			}
			if status, body := post(`{"identifier": "*.nothing.example.com", "profile": "internal"}`, "ops"); status != http.StatusOK {
				t.Fatalf("POST renew-early: %d %s", status, body)
			}
			if status, body := post(`{"profile": "internal"}`, "ops"); status != http.StatusBadRequest {
				t.Fatalf("POST renew-early naming only a profile: %d %s; want 400", status, body)
			}

			resp, err := ts.Client().Get(ts.URL + adminBase + "audit?event=" + acme.EventRenewEarly)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var rows operator.Page[operator.AuditView]
			if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
				t.Fatal(err)
			}
			want := []struct {
				actor, profile, criterion string
			}{
				{authority.ActorCLI, "", "serial 0a1b2c"},
				{authority.ActorAdmin, "internal", "identifier *.nothing.example.com and profile internal"},
			}
			if len(rows.Items) != len(want) {
				t.Fatalf("%d renew_early rows, want %d (one per request that was carried out): %+v", len(rows.Items), len(want), rows.Items)
			}
			for _, w := range want {
				found := false
				for _, row := range rows.Items {
					if row.Actor.Kind != w.actor {
						continue
					}
					found = true
					if row.Outcome != "success" || row.Profile != w.profile || row.Serial != "" || row.Order != "" ||
						!strings.Contains(row.Detail, "matched no certificate") || !strings.Contains(row.Detail, w.criterion) {
						t.Errorf("the %s's row %+v; want a success of profile %q, naming no certificate, whose detail says %q matched nothing",
							w.actor, row, w.profile, w.criterion)
					}
					if w.actor == authority.ActorAdmin && row.Actor.ID != "ops" {
						t.Errorf("the admin API's row names operator %q, want ops", row.Actor.ID)
					}
				}
				if !found {
					t.Errorf("no renew_early row by %s: %+v", w.actor, rows.Items)
				}
			}
		})
	}
}
