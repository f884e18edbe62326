package caddyacmeproxy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An audit prune takes its cutoff from the query and nothing from a
// body: a body it was sent (a cutoff written there, a field misspelt)
// says something the prune would not do, so it is refused, as the other
// routes that take no fields refuse one, and no row is deleted.
func TestAnAuditPruneSentABodyIsRefusedAndDeletesNothing(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{"a cutoff in the body", `{"before":"2020-01-01T00:00:00Z"}`},
		{"a field the route does not take", `{"dry_run":true}`},
		{"something that is not JSON", `before=2020-01-01T00:00:00Z`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := fuzzAdminAPI(t) // three audit rows of 2025-06-01
			r := httptest.NewRequest(http.MethodPost, "/acme_proxy/audit/prune?before=2026-01-01T00:00:00Z", strings.NewReader(tt.body))
			err := a.serve(httptest.NewRecorder(), r)
			ae, ok := errors.AsType[caddy.APIError](err)
			if !ok || ae.HTTPStatus != http.StatusBadRequest {
				t.Fatalf("prune with body %s: %v; want a 400", tt.body, err)
			}
			if !strings.Contains(ae.Message, "body") {
				t.Errorf("the message %q does not say the body is what is wrong", ae.Message)
			}
			rows, err := a.app.db.SearchAudit(t.Context(), store.AuditFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 {
				t.Errorf("%d audit rows after the refused prune; want the 3 there were", len(rows))
			}
		})
	}
}
