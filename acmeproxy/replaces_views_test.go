package acmeproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/webui"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An order that replaces a certificate echoes replaces in every view of
// it (RFC 9773 §5): newOrder's answer, the order read back while it is
// pending, ready and valid, finalize's answer — and the operators' views
// of it: the admin API's order and order list (operator.OrderView as
// JSON) and the web page's order detail. An order that replaces nothing
// shows none.
func TestAnOrderShowsWhatItReplacesInEveryViewOfIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e := newTestEnv(t, nil)
		c := e.client(ctx)
		old := e.issue(ctx, c, "www.example.com")
		certID := certIDOf(old.leaf)
		rc := e.raw(c)

		r := rc.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("www.example.com")}, "replaces": certID}, jwsOpts{})
		if r.status != http.StatusCreated {
			t.Fatalf("new-order with replaces: %d %s", r.status, r.body)
		}
		o := createdOrder{url: r.header.Get("Location"), orderJSON: decodeAs[orderJSON](t, r)}
		echoes := func(what string, r rawResponse) {
			t.Helper()
			if got := decodeAs[orderJSON](t, r).Replaces; got != certID {
				t.Errorf("%s: replaces %q, want %q: %s", what, got, certID, r.body)
			}
		}
		echoes("newOrder's answer", r)
		echoes("the order read back", rc.read(o.url))
		for _, az := range o.Authorizations {
			if rc.authz(az).Status == "valid" {
				continue // the first order's validation is reused
			}
			if _, r := rc.answerHTTP01(az, ""); r.status != http.StatusOK {
				t.Fatalf("challenge POST: %d %s", r.status, r.body)
			}
			rc.await(az, "valid")
		}
		echoes("the ready order", rc.await(o.url, "ready"))
		fin := rc.finalize(o, newCSR(t, newKey(t), "", []string{"www.example.com"}, nil))
		if fin.status != http.StatusOK {
			t.Fatalf("finalize: %d %s", fin.status, fin.body)
		}
		echoes("finalize's answer", fin)
		echoes("the valid order", rc.await(o.url, "valid"))

		op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
		id := path.Base(o.url)
		asJSON := func(v any) map[string]any {
			t.Helper()
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		shown, err := op.ShowOrder(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := asJSON(shown)["replaces"]; got != certID {
			t.Errorf("GET /acme_proxy/orders/%s: replaces %v, want %q", id, got, certID)
		}
		if shown, err := op.ShowOrder(ctx, old.order); err != nil || asJSON(shown)["replaces"] != nil {
			t.Errorf("the replaced order shows replaces %v (%v); want none", asJSON(shown)["replaces"], err)
		}
		list, err := op.ListOrders(ctx, store.OrderFilter{AccountID: path.Base(string(c.KID))})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{id: certID, old.order: nil}
		for _, item := range list.Items {
			if got, ok := want[item.ID]; !ok || asJSON(item)["replaces"] != got {
				t.Errorf("GET /acme_proxy/orders: order %s shows replaces %v, want %v", item.ID, asJSON(item)["replaces"], got)
			}
			delete(want, item.ID)
		}
		if len(want) != 0 {
			t.Errorf("the order list lacks %v", want)
		}

		ui, err := webui.New(webui.Config{Operator: op, Prefix: "/ops", InsecureNoAuth: true, CSRFKey: []byte("test key")})
		if err != nil {
			t.Fatal(err)
		}
		page := func(order string) string {
			t.Helper()
			w := httptest.NewRecorder()
			ui.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "https://127.0.0.1/ops/orders/"+order, nil))
			if w.Code != http.StatusOK {
				t.Fatalf("the order page of %s: %d %s", order, w.Code, w.Body)
			}
			return w.Body.String()
		}
		if body := page(id); !strings.Contains(body, `<code id="replaces">`+certID+`</code>`) {
			t.Errorf("the web page of the replacing order does not show replaces %s:\n%s", certID, body)
		}
		if body := page(old.order); strings.Contains(body, `id="replaces"`) {
			t.Errorf("the web page of an order that replaces nothing shows replaces")
		}
	})
}
