package caddyacmeproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// The orders list takes since, an RFC 3339 time: the orders created then
// or later. Any other value is a 400 naming the parameter.
func TestTheAdminOrdersListFiltersByCreationSince(t *testing.T) {
	a := fuzzAdminAPI(t) // orders created at 12:00, 12:01 and 12:02
	tests := []struct {
		name      string
		query     string
		wantItems int
		wantErr   string
	}{
		{"ok/since the second order", "since=2025-06-01T12:01:00Z", 2, ""},
		{"ok/since before every order", "since=2025-06-01T00:00:00Z", 3, ""},
		{"ok/since after every order", "since=2025-06-01T13:00:00Z", 0, ""},
		{"fail/since not a time", "since=yesterday", 0, `parameter since: "yesterday" is not an RFC 3339 time`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			err := a.serve(w, httptest.NewRequest(http.MethodGet, "/acme_proxy/orders?"+tc.query, nil))
			if tc.wantErr != "" {
				var apiErr caddy.APIError
				if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusBadRequest || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("?%s: %v; want a 400 saying %s", tc.query, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("?%s: %v", tc.query, err)
			}
			var page struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil || len(page.Items) != tc.wantItems {
				t.Errorf("?%s: %d orders (%v); want %d", tc.query, len(page.Items), err, tc.wantItems)
			}
		})
	}
}
