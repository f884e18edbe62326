package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// offeringUpstream is a directory whose certificate profiles the test
// changes, counting the reads of it.
type offeringUpstream struct {
	srv   *httptest.Server
	reads atomic.Int32

	mu       sync.Mutex
	profiles []string
}

func newOfferingUpstream(t *testing.T, profiles ...string) *offeringUpstream {
	t.Helper()
	u := &offeringUpstream{profiles: profiles}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/dir" {
			http.NotFound(w, r)
			return
		}
		u.reads.Add(1)
		u.mu.Lock()
		offered := map[string]string{}
		for _, p := range u.profiles {
			offered[p] = "the " + p + " profile"
		}
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"newNonce": u.srv.URL + "/nonce", "newAccount": u.srv.URL + "/account", "newOrder": u.srv.URL + "/order",
			"revokeCert": u.srv.URL + "/revoke", "keyChange": u.srv.URL + "/key",
			"meta": map[string]any{"profiles": offered},
		})
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *offeringUpstream) offerAlso(p string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.profiles = append(u.profiles, p)
}

// upstreamProfileFor is the upstream profile the signer of b asks for an
// order choosing the certificate profile "cp", mapped to upstream.
func upstreamProfileFor(t *testing.T, b *bench, upstream string) (string, error) {
	t.Helper()
	binding := &signer.Binding{CertificateProfile: func(name string) (*signer.CertificateProfile, bool) {
		return &signer.CertificateProfile{UpstreamProfile: upstream}, name == "cp"
	}}
	c := b.s.client(&recorder{base: b.s.transport, now: b.clock.Now})
	return b.s.upstreamProfile(context.Background(), c, binding, store.RelayOrder{OrderID: "o1", CertificateProfile: "cp"})
}

// acmez keeps a directory for twelve hours, process-wide, by URL; the
// signer a reload builds must see what the upstream offers now.
func TestAProfileTheUpstreamBeganOfferingIsSeenByASignerBuiltAfterwards(t *testing.T) {
	up := newOfferingUpstream(t, "classic")
	first := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
	if _, err := upstreamProfileFor(t, first, "shortlived"); err == nil || !strings.Contains(err.Error(), "it offers: classic") {
		t.Fatalf("before the upstream offers it: %v; want the relay refused, naming what is offered", err)
	}
	// The upstream's acmez copy is warm too.
	if _, err := first.s.upstream.GetDirectory(context.Background()); err != nil {
		t.Fatal(err)
	}
	up.offerAlso("shortlived")

	reloaded := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
	got, err := upstreamProfileFor(t, reloaded, "shortlived")
	if err != nil || got != "shortlived" {
		t.Errorf("after the upstream offers it: %q, %v; want shortlived asked for", got, err)
	}
}

func TestASignerReadsWhatTheUpstreamOffersAgainOnlyAfterItsHold(t *testing.T) {
	up := newOfferingUpstream(t, "classic")
	b := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
	if _, err := upstreamProfileFor(t, b, "classic"); err != nil {
		t.Fatal(err)
	}
	up.offerAlso("shortlived")

	if _, err := upstreamProfileFor(t, b, "shortlived"); err == nil {
		t.Error("within the hold, the signer saw a change it should not have read yet")
	}
	if n := up.reads.Load(); n != 1 {
		t.Errorf("the directory was read %d times within the hold; want 1", n)
	}
	b.clock.Advance(directoryHold)
	if got, err := upstreamProfileFor(t, b, "shortlived"); err != nil || got != "shortlived" {
		t.Errorf("after the hold: %q, %v; want shortlived asked for", got, err)
	}
	if n := up.reads.Load(); n != 2 {
		t.Errorf("the directory was read %d times; want 2", n)
	}
}
