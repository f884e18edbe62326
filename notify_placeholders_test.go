package caddyacmeproxy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

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

// An email's helo takes placeholders as its smtp does — one config for
// a fleet greets each relay with the host's own name
// ({env.HOSTNAME}, {system.hostname}) — and what the placeholder holds
// is checked when the config loads: a value that is no EHLO argument
// (RFC 5321 4.1.1.1: a domain name or an address literal), or an empty
// one, fails the load naming the key, rather than every delivery to a
// relay refusing it.
func TestAnEmailsHELOTakesAPlaceholderWhoseValueIsCheckedWhenTheConfigLoads(t *testing.T) {
	const env = "ACME_PROXY_TEST_HELO"
	hostname, _ := os.Hostname()
	tests := []struct {
		name    string
		set     bool   // env is set
		value   string // env's value
		helo    string // as the Caddyfile writes it
		profile bool   // in the profile's notify list, not the app's
		want    string // the destination's helo once loaded
		wantErr string // "": loads
	}{
		{name: "ok/a fully qualified name from the environment", set: true, value: "acme-1.example.net",
			helo: "{env." + env + "}", want: "acme-1.example.net"},
		{name: "ok/a name built of a placeholder", set: true, value: "acme-1",
			helo: "{env." + env + "}.example.net", want: "acme-1.example.net"},
		{name: "ok/an address literal built of a placeholder", set: true, value: "192.0.2.1",
			helo: "[{env." + env + "}]", want: "[192.0.2.1]"},
		{name: "ok/in a profile's notify list", set: true, value: "acme-2.example.net",
			helo: "{env." + env + "}", profile: true},
		{name: "fail/a bare host name", set: true, value: "vm",
			helo: "{env." + env + "}", wantErr: `notify email: helo: "vm" is not fully qualified`},
		{name: "fail/a bare host name in a profile's notify list", set: true, value: "vm",
			helo: "{env." + env + "}", profile: true, wantErr: `notify email: helo: "vm" is not fully qualified`},
		{name: "fail/a value holding a line break, which would write a command of its own", set: true,
			value: "a.example.net\r\nRSET", helo: "{env." + env + "}", wantErr: "notify email: helo: "},
		{name: "fail/an unset variable", helo: "{env." + env + "}",
			wantErr: "notify email: helo: evaluated placeholder {env." + env + "} is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.set {
				t.Setenv(env, tt.value)
			} else {
				t.Setenv(env, "")
				os.Unsetenv(env)
			}
			err := loadHELO(t, tt.helo, tt.profile)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load: %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			// A profile's list loaded only if its helo, replaced, was
			// valid: "{env.X}" as written is not.
			if tt.profile {
				return
			}
			if got := loadedEmail(t).HELO; got != tt.want {
				t.Errorf("the loaded destination's helo is %q; want %q", got, tt.want)
			}
		})
	}

	// {system.hostname} is the machine's name: whether it loads depends
	// on the machine, and either way says so.
	t.Run("system.hostname/the machine's name, loaded when fully qualified", func(t *testing.T) {
		err := loadHELO(t, "{system.hostname}", false)
		if fqdn := strings.Contains(hostname, ".") && !strings.HasSuffix(hostname, "."); fqdn {
			if err != nil {
				t.Fatalf("load with the host name %q: %v", hostname, err)
			}
			if got := loadedEmail(t).HELO; got != hostname {
				t.Errorf("the loaded destination's helo is %q; want the host name %q", got, hostname)
			}
		} else if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("notify email: helo: %q is not fully qualified", hostname)) {
			t.Errorf("load with the host name %q, not fully qualified: %v; want it refused naming helo", hostname, err)
		}
	})
}

// loadHELO adapts and loads a Caddyfile whose email destination (the
// app's, or the profile's) has helo as written, and returns the error of
// either step.
func loadHELO(t *testing.T, helo string, inProfile bool) error {
	t.Helper()
	dir := isolate(t)
	email := fmt.Sprintf("notify email {\n\t\t\tsmtp 127.0.0.1:%d\n\t\t\tfrom acme@example.com\n\t\t\tto ops@example.com\n\t\t\thelo %s\n\t\t}", freePort(t), helo)
	global, profile := email, ""
	if inProfile {
		global, profile = "", email
	}
	cfgFile := fmt.Sprintf(`{
	admin off
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	acme_proxy {
		database %[2]s
		%[3]s
	}
}

http://127.0.0.1:%[4]d {
	acme_proxy {
		profile a
		%[5]s
	}
}
`, filepath.Join(dir, "storage"), filepath.Join(dir, "acme_proxy.db"), global, freePort(t), profile)
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgFile), nil)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	t.Cleanup(func() { caddy.Stop() })
	return caddy.Load(cfgJSON, true)
}

// loadedEmail is the loaded app's one email destination.
func loadedEmail(t *testing.T) notify.Destination {
	t.Helper()
	app := activeApp(t)
	if len(app.Notify) != 1 {
		t.Fatalf("the app has %d notify destinations; want one", len(app.Notify))
	}
	return app.Notify[0]
}
