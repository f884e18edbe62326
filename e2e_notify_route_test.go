package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"testing"
	"time"

	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// An operator deactivates an account through the admin API of an
// instance whose config lacks the account's profile (here the same Caddy
// reloaded without it): the account_deactivated notification waits for
// an instance that mounts the profile (the config reloaded with it) and
// goes to the destination that profile's own notify list gives it, which
// only such an instance knows.
func TestAnAccountDeactivatedWhereItsProfileIsNotMountedIsNotifiedWhereItIs(t *testing.T) {
	delivered := make(chan notify.Event, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev notify.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Errorf("a delivery's body: %v", err)
		}
		select {
		case delivered <- ev:
		default:
		}
	}))
	defer hook.Close()

	env := newE2EEnv(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	with := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin,
		ExtraProfiles: fmt.Sprintf("acme_proxy {\nprofile routed\nnotify webhook %s/hook {\nevents %s\n}\n}", hook.URL, acme.EventAccountDeactivated)}
	without := with
	without.ExtraProfiles = ""
	env.load(t, with)
	unloadAdminOnCleanup(t)

	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL("routed"), UserAgent: "caddy-acme-proxy-e2e"}
	acct, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	id := path.Base(acct.URI)

	env.load(t, without)
	if status, body := b.adminCall(t, http.MethodPost, "/acme_proxy/accounts/"+id+"/deactivate", ""); status != http.StatusOK {
		t.Fatalf("deactivating the account where its profile is not mounted: %d %s", status, body)
	}
	status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/jobs?kind="+authority.NotifyRouteKind, "")
	var routes operator.Page[operator.JobView]
	if status != http.StatusOK || json.Unmarshal(body, &routes) != nil || len(routes.Items) != 1 {
		t.Fatalf("the %s jobs: %d %s; want the deactivation's", authority.NotifyRouteKind, status, body)
	}

	env.load(t, with)
	route := strconv.FormatInt(routes.Items[0].ID, 10)
	for deadline := time.Now().Add(e2eWait); ; {
		select {
		case ev := <-delivered:
			if ev.Event != acme.EventAccountDeactivated || ev.Account != id || ev.Profile != "routed" {
				t.Fatalf("delivered %+v; want the deactivation of account %s of profile routed", ev, id)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the deactivation was never delivered")
		}
		// The instance without the profile put the job off for 30 s:
		// run it now (409 while it runs, or once it is done).
		b.adminCall(t, http.MethodPost, "/acme_proxy/jobs/"+route+"/retry", "")
	}
}
