package acmeproxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A server built on a store not opened yet (a configuration being
// checked, or an app that has not started) answers 503 with Retry-After
// and mints no nonce, having no key to sign one with; once the store is
// open and the server started it serves.
func TestAServerAnswers503UntilItIsStarted(t *testing.T) {
	ctx := context.Background()
	db, err := store.PrepareSQLite(filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	_, src := newTestCA(t)
	sgn, err := localca.New(src, localca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := PrepareServer(ProfileConfig{Profile: "p"}, Options{DB: db, Queue: jobs.NewQueue(db, nil), Signer: sgn, Validator: sjValidator{}})
	if err != nil {
		t.Fatal(err)
	}
	get := func() *http.Response {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://ca.test/acme/p/directory", nil))
		return w.Result()
	}

	resp := get()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Replay-Nonce") != "" {
		t.Fatalf("before Start: status %d, Retry-After %q, Replay-Nonce %q; want 503 with Retry-After and no nonce",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Replay-Nonce"))
	}
	if err := db.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if resp := get(); resp.StatusCode != http.StatusOK || resp.Header.Get("Replay-Nonce") == "" {
		t.Fatalf("after Start: status %d, Replay-Nonce %q; want 200 with a nonce", resp.StatusCode, resp.Header.Get("Replay-Nonce"))
	}
}
