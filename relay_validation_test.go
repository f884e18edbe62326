package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

// failingValidationUpstream is an ACME CA that places every order with
// one dns-01 authorization and, once its challenge is answered, finds it
// invalid with a problem of type typ and detail (UPSTREAM in it reads
// as its own URL): a validation failure
// Pebble cannot produce (it checks no CAA records). Every URL it gives
// is its own; its directory takes any query.
func failingValidationUpstream(t *testing.T, name, typ, detail string) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	var triggered atomic.Bool
	up = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Replay-Nonce", fmt.Sprintf("nonce-%d", time.Now().UnixNano()))
		w.Header().Set("Content-Type", "application/json")
		status := "pending"
		if triggered.Load() {
			status = "invalid"
		}
		order := func(code int) {
			w.Header().Set("Location", up.URL+"/order/1")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "identifiers": []map[string]string{{"type": "dns", "value": name}},
				"authorizations": []string{up.URL + "/authz/1"}, "finalize": up.URL + "/finalize/1"})
		}
		challenge := func(status string) map[string]any {
			c := map[string]any{"type": "dns-01", "status": status, "url": up.URL + "/chall/1", "token": "tok3nOfTheUpstream"}
			if status == "invalid" {
				c["error"] = map[string]any{"type": typ, "detail": strings.ReplaceAll(detail, "UPSTREAM", up.URL), "status": 403}
			}
			return c
		}
		switch r.URL.Path {
		case "/dir":
			_ = json.NewEncoder(w).Encode(map[string]string{"newNonce": up.URL + "/nonce", "newAccount": up.URL + "/account",
				"newOrder": up.URL + "/order", "revokeCert": up.URL + "/revoke", "keyChange": up.URL + "/key"})
		case "/nonce":
			w.WriteHeader(http.StatusOK)
		case "/account":
			w.Header().Set("Location", up.URL+"/acct/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"valid"}`))
		case "/order":
			order(http.StatusCreated)
		case "/order/1":
			order(http.StatusOK)
		case "/authz/1":
			_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "identifier": map[string]string{"type": "dns", "value": name},
				"challenges": []any{challenge(status)}})
		case "/chall/1":
			triggered.Store(true)
			_ = json.NewEncoder(w).Encode(challenge("processing"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// A client whose order the upstream CA will not issue for a reason of
// its name's own — its CAA records forbid that CA, its DNS does not
// answer, the CA cannot reach it — sees the order fail with that problem
// type (RFC 8555 §6.7) and the upstream's detail, without the relay's
// secrets or the upstream's own URLs, so that it knows what to fix; one
// that says the relay's answer to the challenge was wrong is the relay's
// business, and the client sees the generic problem.
func TestAClientSeesWhyTheUpstreamCouldNotValidateItsName(t *testing.T) {
	const token = "s3cretQueryToken"
	tests := []struct {
		name, typ string
		// want is the type of the order's error; detail, when set, is
		// in its detail.
		want, detail string
	}{
		{"CAA forbids the upstream", "urn:ietf:params:acme:error:caa", "urn:ietf:params:acme:error:caa", "CAA record for NAME prevents issuance"},
		{"the name's DNS fails", "urn:ietf:params:acme:error:dns", "urn:ietf:params:acme:error:dns", "DNS problem: SERVFAIL looking up TXT for _acme-challenge.NAME"},
		{"the upstream cannot connect", "urn:ietf:params:acme:error:connection", "urn:ietf:params:acme:error:connection", "Fetching http://NAME/: Timeout during connect"},
		{"the upstream refuses the name", "urn:ietf:params:acme:error:rejectedIdentifier", "urn:ietf:params:acme:error:rejectedIdentifier", ""},
		{"the relay's answer is wrong", "urn:ietf:params:acme:error:unauthorized", "urn:ietf:params:acme:error:serverInternal", ""},
		{"the relay's record is wrong", "urn:ietf:params:acme:error:incorrectResponse", "urn:ietf:params:acme:error:serverInternal", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			name := fmt.Sprintf("refused%d.example.com", i)
			detail := strings.ReplaceAll(tt.detail, "NAME", name)
			if detail == "" {
				detail = "refused by the upstream"
			}
			b := newRelayBench(t)
			// The upstream quotes its account's URL and the token of
			// the relay's directory URL.
			up := failingValidationUpstream(t, name, tt.typ, detail+" (account UPSTREAM/acct/1, token "+token+")")
			b.directory = up.URL + "/dir?token=" + token
			p := b.start()
			c := p.client(t, ctx)
			o := b.readyOrder(t, ctx, c, name)
			fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
			defer fcancel()
			if _, _, err := c.CreateOrderCert(fctx, o.FinalizeURL, relayCSR(t, name), true); err == nil {
				t.Fatal("the order was issued; want it failed")
			}
			got, err := c.GetOrder(ctx, o.URI)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != acme.StatusInvalid || got.Error == nil {
				t.Fatalf("the order is %s with error %v; want invalid with an error", got.Status, got.Error)
			}
			if got.Error.ProblemType != tt.want {
				t.Errorf("the order's error is %s: %s; want %s", got.Error.ProblemType, got.Error.Detail, tt.want)
			}
			if tt.detail != "" && !strings.Contains(got.Error.Detail, detail) {
				t.Errorf("the order's error detail %q; want it to carry the upstream's %q", got.Error.Detail, detail)
			}
			for _, secret := range []string{token, up.URL, strings.TrimPrefix(up.URL, "https://")} {
				if strings.Contains(got.Error.Detail, secret) {
					t.Errorf("the order's error detail %q shows %q", got.Error.Detail, secret)
				}
			}
		})
	}
}
