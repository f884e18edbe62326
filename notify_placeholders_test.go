package caddyacmeproxy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// An operator rotates the token a notify script's argument takes from
// {env.*} and reloads: a delivery queued before goes out to the script
// with the new token, as one to a webhook goes out with its rotated
// header, since the destination is known by its arguments as written.
func TestADeliveryQueuedBeforeAScriptsTokenIsRotatedRunsTheScriptWithTheNewToken(t *testing.T) {
	dir := t.TempDir()
	got := filepath.Join(dir, "token")
	script := filepath.Join(dir, "notify.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s' \"$1\" > "+got+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	written := []notify.Destination{{Type: notify.TypeScript, Command: script, Args: []string{"{env.ACME_PROXY_TEST_NOTIFY_TOKEN}"}}}
	load := func(token string) []notify.Destination {
		t.Helper()
		t.Setenv("ACME_PROXY_TEST_NOTIFY_TOKEN", token)
		ds, err := expandNotify(written)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}

	before := load("token-before-rotation")
	queued := notify.Jobs(before, notify.Event{Event: acme.EventAccountCreated, Profile: "a", Time: time.Now()})
	if len(queued) != 1 {
		t.Fatalf("%d jobs; want one", len(queued))
	}
	after := load("token-after-rotation")
	d := notify.NewDeliverer(notify.Options{})
	if err := d.Register(after...); err != nil {
		t.Fatal(err)
	}
	out := d.Run(context.Background(), &jobs.Job{ID: 1, Kind: notify.Kind, Payload: queued[0].Payload})
	if out.Kind() != "done" {
		t.Fatalf("the queued delivery: %s; want it delivered", out)
	}
	if b, err := os.ReadFile(got); err != nil || string(b) != "token-after-rotation" {
		t.Errorf("the script got %q (%v); want the rotated token", b, err)
	}
}
