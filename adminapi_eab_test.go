package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The admin API's EAB key list answers a page, as the orders list does:
// {items, next}, at most limit keys (100 by default), the next page
// through after=<next>; a limit out of range or a cursor naming no key
// of the profile is a 400, not a page.
func TestTheAdminEABKeyListAnswersPagesThatFollowOneAnother(t *testing.T) {
	a := fuzzAdminAPI(t)
	ctx := context.Background()
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const keys = 105
	for i := range keys {
		if err := a.app.db.CreateEABKey(ctx, store.EABKey{KID: fmt.Sprintf("k%03d", i), Profile: "p", Label: "l",
			HMACKey: []byte("mac"), Created: at.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.app.db.CreateEABKey(ctx, store.EABKey{KID: "other-key", Profile: "other", Label: "l", HMACKey: []byte("mac"), Created: at}); err != nil {
		t.Fatal(err)
	}
	list := func(t *testing.T, query string) (operator.Page[operator.EABKeyView], error) {
		t.Helper()
		w := httptest.NewRecorder()
		err := a.serve(w, httptest.NewRequest(http.MethodGet, "/acme_proxy/eab?"+query, nil))
		var p operator.Page[operator.EABKeyView]
		if err == nil {
			if jerr := json.Unmarshal(w.Body.Bytes(), &p); jerr != nil {
				t.Fatalf("?%s: %v\n%s", query, jerr, w.Body)
			}
		}
		return p, err
	}

	t.Run("ok/pages of limit follow one another to the last key", func(t *testing.T) {
		var seen []string
		query := "profile=p&limit=40"
		for pages := 0; ; pages++ {
			p, err := list(t, query)
			if err != nil {
				t.Fatalf("?%s: %v", query, err)
			}
			if len(p.Items) > 40 || pages > 3 {
				t.Fatalf("?%s: %d keys on page %d; want at most 40 a page, 3 pages", query, len(p.Items), pages+1)
			}
			for _, k := range p.Items {
				seen = append(seen, k.KID)
			}
			if p.Next == "" {
				break
			}
			query = "profile=p&limit=40&after=" + url.QueryEscape(p.Next)
		}
		if len(seen) != keys || seen[0] != "k104" || seen[keys-1] != "k000" {
			t.Errorf("the pages listed %d keys, %v … %v; want all %d, k104 first, k000 last", len(seen), seen[:1], seen[len(seen)-1:], keys)
		}
	})
	t.Run("ok/without a limit, a page of 100 and a cursor", func(t *testing.T) {
		p, err := list(t, "profile=p")
		if err != nil || len(p.Items) != 100 || p.Next != "k005" {
			t.Errorf("?profile=p: %d keys, next %q, %v; want 100 and next k005", len(p.Items), p.Next, err)
		}
	})
	for _, tc := range []struct {
		name, query, wantErr string
	}{
		{"fail/a limit of 0", "profile=p&limit=0", "not a whole number from 1 to 1000"},
		{"fail/a limit past the most", "profile=p&limit=1001", "not a whole number from 1 to 1000"},
		{"fail/a cursor naming no key", "profile=p&after=nope", `no EAB key "nope"`},
		{"fail/a cursor naming another profile's key", "profile=p&after=other-key", "of profile other, not p"},
		{"fail/no profile", "limit=5", "name the profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := list(t, tc.query)
			var apiErr caddy.APIError
			if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusBadRequest || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("?%s: %v; want a 400 saying %s", tc.query, err, tc.wantErr)
			}
		})
	}
}

// `caddy acme-proxy eab list` prints a page and, when there is more, the
// flag that lists the next, as `orders` does; that flag lists it.
func TestTheCLIListsEABKeysAPageAtATimeAndSaysHowToListTheNext(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	at := time.Now().Add(-time.Hour)
	for i := range 3 {
		if err := db.CreateEABKey(ctx, store.EABKey{KID: fmt.Sprintf("k%d", i), Profile: "p", Label: fmt.Sprintf("team-%d", i),
			HMACKey: []byte("mac"), Created: at.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	addr := adminServer(t, db).Listener.Addr().String()
	rows := regexp.MustCompile(`(?m)^k\d\s`)
	out, err := runCLI("eab", "list", "--profile", "p", "--limit", "2", "--address", addr)
	if err != nil {
		t.Fatalf("eab list --limit 2: %v\n%s", err, out)
	}
	if got := rows.FindAllString(out, -1); len(got) != 2 || !strings.Contains(out, "(more: --after k1)") {
		t.Fatalf("eab list --limit 2: rows %q; want k2 and k1 and a line naming --after k1:\n%s", got, out)
	}
	out, err = runCLI("eab", "list", "--profile", "p", "--limit", "2", "--after", "k1", "--address", addr)
	if err != nil {
		t.Fatalf("eab list --after k1: %v\n%s", err, out)
	}
	if got := rows.FindAllString(out, -1); len(got) != 1 || !strings.HasPrefix(got[0], "k0") || strings.Contains(out, "more:") {
		t.Errorf("eab list --after k1: rows %q; want k0 alone and no more:\n%s", got, out)
	}
}
