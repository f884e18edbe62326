package caddyacmeproxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/certmagic"
	acmez "github.com/mholt/acmez/v3/acme"
	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer/relay"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// These tests run a relay profile with prepare_upstream on against the
// in-process Pebble (validating dns-01 for real through the test DNS).

// startPreparedRelay starts a process on a new relay bench with
// prepare_upstream on and registers a client's account at it: where every
// test of this file begins.
func startPreparedRelay(t *testing.T, ctx context.Context) (*relayBench, *relayProcess, *acme.Client) {
	t.Helper()
	b := newRelayBench(t)
	b.prepareUpstream = true
	p := b.start()
	return b, p, p.client(t, ctx)
}

// preparedUpstream waits for the relay_prepared job of a local order and
// returns it with the upstream order it records.
func preparedUpstream(t *testing.T, q *jobs.Queue, orderID string) (store.Job, string) {
	t.Helper()
	var job store.Job
	relayWaitFor(t, 20*time.Second, "the prepared upstream order of "+orderID, func() bool {
		js, err := q.List(context.Background(), store.JobFilter{Kind: relay.PreparedKind, Key: orderID})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 0 {
			return false
		}
		job = js[0]
		return true
	})
	var p struct {
		Upstream string `json:"upstream_order"`
	}
	if err := jobs.Decode(&job, &p); err != nil || p.Upstream == "" {
		t.Fatalf("relay_prepared payload %s: %v", job.Payload, err)
	}
	return job, p.Upstream
}

// readyPreparedUpstream waits for the upstream order prepared for the
// local order orderID and for it to be ready, and returns the
// relay_prepared job, the upstream order's URL and a view to read it.
func (b *relayBench) readyPreparedUpstream(t *testing.T, ctx context.Context, q *jobs.Queue, db *store.DB, orderID string) (store.Job, string, upstreamView) {
	t.Helper()
	job, up := preparedUpstream(t, q, orderID)
	view := b.upstreamView(t, ctx, db)
	relayWaitFor(t, 20*time.Second, "the prepared upstream order to be ready", func() bool {
		return view.order(t, ctx, up).Status == acmez.StatusReady
	})
	return job, up, view
}

// upstreamView reads upstream orders and authorizations as the relay's
// upstream account, the way the account's owner sees them.
type upstreamView struct {
	c    *acmez.Client
	acct acmez.Account
}

func (b *relayBench) upstreamView(t *testing.T, ctx context.Context, db *store.DB) upstreamView {
	t.Helper()
	ra, err := db.GetRelayAccount(ctx, (&certmagic.ACMEIssuer{CA: b.pebble.dir}).IssuerKey(), "relay")
	if err != nil {
		t.Fatalf("the relay's upstream account: %v", err)
	}
	block, _ := pem.Decode([]byte(ra.KeyPEM))
	if block == nil {
		t.Fatal("the upstream account key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.pebble.tlsRoots()}}}
	t.Cleanup(hc.CloseIdleConnections)
	return upstreamView{
		c:    &acmez.Client{Directory: b.pebble.dir, HTTPClient: hc},
		acct: acmez.Account{Location: ra.Location, PrivateKey: k.(crypto.Signer)},
	}
}

func (v upstreamView) order(t *testing.T, ctx context.Context, url string) acmez.Order {
	t.Helper()
	o, err := v.c.GetOrder(ctx, v.acct, acmez.Order{Location: url})
	if err != nil {
		t.Fatalf("reading the upstream order %s: %v", url, err)
	}
	return o
}

func (v upstreamView) authzStatuses(t *testing.T, ctx context.Context, o acmez.Order) []string {
	t.Helper()
	var out []string
	for _, u := range o.Authorizations {
		z, err := v.c.GetAuthorization(ctx, v.acct, u)
		if err != nil {
			t.Fatalf("reading the upstream authorization %s: %v", u, err)
		}
		out = append(out, z.Status)
	}
	return out
}

func TestAPreparedRelayFinalizesWithTheUpstreamOrderPlacedWhileTheClientProvedItsNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b, p, c := startPreparedRelay(t, ctx)
	const name = "early.example.com"
	o := b.readyOrder(t, ctx, c, name)
	id := path.Base(o.URI)

	_, up, view := b.readyPreparedUpstream(t, ctx, p.queue, p.db, id)
	// Prepared, not issued: the upstream finalize waits for the client's.
	if n := b.pebble.count(pebbleFinalize); n != 0 {
		t.Fatalf("Pebble saw %d finalizes before the client finalized; want none", n)
	}

	ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, name), true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	b.pebble.checkChainEndsAtRoot(t, pemOf(ders), name)
	if n := b.pebble.count(pebbleNewOrder); n != 1 {
		t.Errorf("Pebble saw %d new orders; want 1, the prepared one relayed", n)
	}
	if st := view.order(t, ctx, up).Status; st != acmez.StatusValid {
		t.Errorf("the prepared upstream order is %s; want valid, the one the certificate came from", st)
	}
}

func TestAPreparedRelayedFinalizeAnswersValidInItsRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b, p, c := startPreparedRelay(t, ctx)
	const name = "prepared-quick.example.com"
	o := b.readyOrder(t, ctx, c, name)
	b.readyPreparedUpstream(t, ctx, p.queue, p.db, path.Base(o.URI))

	log := &requestLog{next: c.HTTPClient.Transport}
	c.HTTPClient = &http.Client{Transport: log}
	ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, name), true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	b.pebble.checkChainEndsAtRoot(t, pemOf(ders), name)
	// x/crypto polls the order only when the finalize answer is not
	// valid: the relay of a prepared order (its mapping made durable
	// beside the upstream finalize's first request) is in the answer.
	orderPath := "/order/" + path.Base(o.URI)
	for _, r := range log.since(0) {
		if strings.HasSuffix(r, orderPath) {
			t.Errorf("the client polled the order (%s) after finalize; want the finalize to answer valid with the certificate", r)
		}
	}
	if n := b.pebble.count(pebbleNewOrder); n != 1 {
		t.Errorf("Pebble saw %d new orders; want 1, the prepared one relayed", n)
	}
}

func TestAPreparedRelayLosesNothingToARestartBeforeTheFinalize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b, first, c := startPreparedRelay(t, ctx)
	const name = "restarted.example.com"
	o := b.readyOrder(t, ctx, c, name)
	id := path.Base(o.URI)
	b.readyPreparedUpstream(t, ctx, first.queue, first.db, id)
	if err := first.runner.Stop(); err != nil {
		t.Fatal(err)
	}

	// A new process, which has only the database to go on.
	b.start()
	ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, name), true)
	if err != nil {
		t.Fatalf("finalize after the restart: %v", err)
	}
	b.pebble.checkChainEndsAtRoot(t, pemOf(ders), name)
	if n := b.pebble.count(pebbleNewOrder); n != 1 {
		t.Errorf("Pebble saw %d new orders; want 1, the order prepared before the restart relayed after it", n)
	}
}

func TestAPreparedUpstreamOrderWhoseClientNeverFinalizesIsDeactivatedWithoutACertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b, p, c := startPreparedRelay(t, ctx)
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs("abandoned.example.com"))
	if err != nil {
		t.Fatalf("new order: %v", err)
	}
	id := path.Base(o.URI)
	job, up, view := b.readyPreparedUpstream(t, ctx, p.queue, p.db, id)
	if !job.RunAt.After(time.Now().Add(time.Hour)) {
		t.Errorf("the relay_prepared job is due at %v; want at the local order's expiry, a day away", job.RunAt)
	}

	// The client gives up on the order, which is then invalid and can
	// never be finalized; its relay_prepared job comes due (as at the
	// order's expiry, here at once).
	if err := c.RevokeAuthorization(ctx, o.AuthzURLs[0]); err != nil {
		t.Fatalf("deactivating the authorization: %v", err)
	}
	if _, err := p.queue.RetryNow(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	relayWaitFor(t, 20*time.Second, "the relay_prepared job to finish", func() bool {
		got, err := p.queue.Get(ctx, job.ID)
		return err == nil && got.Status == store.JobDone
	})

	got := view.order(t, ctx, up)
	if got.Status != acmez.StatusInvalid {
		t.Errorf("the abandoned upstream order is %s; want invalid, nothing left to issue from", got.Status)
	}
	for _, st := range view.authzStatuses(t, ctx, got) {
		if st != acmez.StatusDeactivated {
			t.Errorf("an upstream authorization of the abandoned order is %s; want deactivated", st)
		}
	}
	if n := b.pebble.count(pebbleFinalize); n != 0 {
		t.Errorf("Pebble saw %d finalizes; want none for an order its client never finalized", n)
	}
}

// preparedRelayCaddyfile serves one relay profile with prepare_upstream
// on, its store at the database path given.
const preparedRelayCaddyfile = `{
	admin off
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	auto_https disable_redirects
	default_bind 127.0.0.1
	https_port %[2]d
	acme_proxy {
		database %[3]s
	}
}

https://127.0.0.1:%[2]d {
	tls internal
	acme_proxy {
		profile prepared
		challenges dns-01
		signer relay {
			directory %[4]s
			trusted_roots %[5]s
			challenge bypass
			prepare_upstream on
		}
	}
}
`

func TestAReloadToAnotherDatabaseStopsTheOldConfigsUpstreamPreparation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := isolate(t)
	pebble := startRelayPebble(t, "127.0.0.1:1", 1, true)
	storage, port := filepath.Join(dir, "storage"), freePort(t)
	config := func(db string) []byte {
		t.Helper()
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(fmt.Sprintf(preparedRelayCaddyfile,
			storage, port, filepath.Join(dir, db), pebble.dir, pebble.rootsFile)), nil)
		if err != nil {
			t.Fatalf("adapt: %v", err)
		}
		return cfg
	}
	load(t, config("first.db"))
	base := fmt.Sprintf("https://127.0.0.1:%d/acme/prepared/", port)
	hc := relayCaddyClient(t, storage)
	if status, body := getEventually(t, hc, base+"directory"); status != http.StatusOK {
		t.Fatalf("directory: %d %s", status, body)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := &acme.Client{Key: key, DirectoryURL: base + "directory", HTTPClient: hc}
	if _, err := c.Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
		t.Fatalf("register: %v", err)
	}

	// The preparation of a new order waits on the upstream's newOrder.
	held := pebble.holdNewOrders(t)
	if _, err := c.AuthorizeOrder(ctx, acme.DomainIDs("reload.example.com")); err != nil {
		t.Fatalf("new order: %v", err)
	}
	select {
	case <-held.arrived:
	case <-ctx.Done():
		t.Fatal("the preparation never asked the upstream for its order")
	}

	// A reload to another database unloads the first config, whose
	// store is then closed.
	if err := caddy.Load(config("second.db"), true); err != nil {
		t.Fatalf("reload: %v", err)
	}
	select {
	case <-held.cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the old config's preparation still waits on the upstream 20s after the reload; want it stopped with its config")
	}
}
