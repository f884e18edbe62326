package notify_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// rotations are destinations before and after an operator rotated their
// secrets, with the secrets that must appear nowhere.
var rotations = []struct {
	name       string
	before     notify.Destination
	rotate     func(*notify.Destination)
	secrets    []string
	authHeader string // the header the receiver reads the rotated secret from
}{
	{"webhook/a bearer token in a header", notify.Destination{Type: notify.TypeWebhook, URL: "https://hooks.example.com/acme",
		Headers: map[string]string{"Authorization": "Bearer hunter2"}},
		func(d *notify.Destination) { d.Headers = map[string]string{"Authorization": "Bearer rotated2"} },
		[]string{"hunter2", "rotated2"}, "Authorization"},
	{"webhook/the HMAC secret", notify.Destination{Type: notify.TypeWebhook, URL: "https://hooks.example.com/acme", Secret: "hmac-one"},
		func(d *notify.Destination) { d.Secret = "hmac-two" }, []string{"hmac-one", "hmac-two"}, ""},
	{"webhook/a token in the URL's query", notify.Destination{Type: notify.TypeWebhook, URL: "https://hooks.example.com/acme?token=qtok1"},
		func(d *notify.Destination) { d.URL = "https://hooks.example.com/acme?token=qtok2" }, []string{"qtok1", "qtok2"}, ""},
	{"webhook/credentials in the URL", notify.Destination{Type: notify.TypeWebhook, URL: "https://bot:upass1@hooks.example.com/acme"},
		func(d *notify.Destination) { d.URL = "https://bot2:upass2@hooks.example.com/acme" }, []string{"upass1", "upass2", "bot2"}, ""},
	{"email/the SMTP username and password", notify.Destination{Type: notify.TypeEmail, SMTP: "mail.example.com:587",
		From: "ca@example.com", To: []string{"pki@example.com"}, Username: "user-one", Password: "smtp-one"},
		func(d *notify.Destination) { d.Username, d.Password = "user-two", "smtp-two" },
		[]string{"user-one", "smtp-one", "user-two", "smtp-two"}, ""},
}

func TestADestinationsIDNeitherChangesWithNorRevealsItsSecrets(t *testing.T) {
	for _, tc := range rotations {
		t.Run(tc.name, func(t *testing.T) {
			after := tc.before
			tc.rotate(&after)
			ev := sampleEvent(acme.EventCertificateIssued)
			before, rotated := notify.Jobs([]notify.Destination{tc.before}, ev), notify.Jobs([]notify.Destination{after}, ev)
			if tc.before.ID() != after.ID() || string(before[0].Payload) != string(rotated[0].Payload) {
				t.Errorf("IDs %q and %q, payloads %s and %s: want the same whatever the secret", tc.before.ID(), after.ID(), before[0].Payload, rotated[0].Payload)
			}
			for _, s := range tc.secrets {
				if strings.Contains(string(before[0].Payload)+string(rotated[0].Payload), s) {
					t.Errorf("the job payload carries %q", s)
				}
			}
		})
	}
}

func TestDestinationsThatDeliverElsewhereHaveOtherIDs(t *testing.T) {
	base := notify.Destination{Type: notify.TypeWebhook, URL: "https://hooks.example.com/acme", Headers: map[string]string{"Authorization": "x"}}
	tests := []struct {
		name   string
		change func(*notify.Destination)
	}{
		{"another host", func(d *notify.Destination) { d.URL = "https://other.example.com/acme" }},
		{"another path", func(d *notify.Destination) { d.URL = "https://hooks.example.com/other" }},
		{"another query parameter", func(d *notify.Destination) { d.URL = "https://hooks.example.com/acme?channel=x" }},
		{"another header name", func(d *notify.Destination) { d.Headers = map[string]string{"X-Token": "x"} }},
		{"other events", func(d *notify.Destination) { d.Events = []string{acme.EventCertificateRevoked} }},
		{"another profile's list", func(d *notify.Destination) { d.Scope = "internal" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			other := base
			tc.change(&other)
			if other.ID() == base.ID() {
				t.Errorf("ID %q for both", base.ID())
			}
		})
	}
}

// The Deliverer a config reload builds knows the destinations with their
// new secrets; a delivery queued under the old ones goes out with them.
func TestAQueuedDeliveryGoesOutWithTheSecretsOfTheReloadedConfig(t *testing.T) {
	for _, tc := range rotations {
		if tc.before.Type != notify.TypeWebhook {
			continue // the e-mail's ID is the same (above); its delivery is no different
		}
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t)
			old, rotated := tc.before, tc.before
			tc.rotate(&rotated)
			old.URL = rebase(old.URL, rcv.URL)
			rotated.URL = rebase(rotated.URL, rcv.URL)
			r := newRig(t, notify.Options{}, rotated)
			ids := r.event(t, sampleEvent(acme.EventCertificateIssued), old)
			if j := r.wait(t, ids[0]); j.Status != store.JobDone {
				t.Fatalf("job %s after %d attempts (%s); want done", j.Status, j.Attempts, j.LastError)
			}
			got := rcv.deliveries()
			if len(got) != 1 {
				t.Fatalf("%d deliveries", len(got))
			}
			if tc.authHeader != "" && got[0].header.Get(tc.authHeader) != rotated.Headers[tc.authHeader] {
				t.Errorf("%s: %q; want the rotated %q", tc.authHeader, got[0].header.Get(tc.authHeader), rotated.Headers[tc.authHeader])
			}
			if rotated.Secret != "" && got[0].header.Get(notify.SignatureHeader) != notify.Sign(rotated.Secret, got[0].body) {
				t.Errorf("the delivery is not signed with the rotated secret")
			}
		})
	}
}

// rebase points a hooks.example.com URL at the test's receiver, keeping
// its credentials, path and query.
func rebase(u, rcv string) string {
	u = strings.Replace(u, "https://", "http://", 1)
	return strings.Replace(u, "hooks.example.com", strings.TrimPrefix(rcv, "http://"), 1)
}

// Two profiles may send to one receiver, each with its own token; within
// one list, two destinations differing only in secrets are refused.
func TestDestinationsDifferingOnlyInSecretsAreToldApartByProfileAndRefusedWithinOne(t *testing.T) {
	rcv := newReceiver(t)
	a := notify.Destination{Type: notify.TypeWebhook, URL: rcv.URL, Headers: map[string]string{"Authorization": "Bearer a"}, Scope: "a"}
	b := a
	b.Headers, b.Scope = map[string]string{"Authorization": "Bearer b"}, "b"
	r := newRig(t, notify.Options{}, a, b)
	ids := r.event(t, sampleEvent(acme.EventCertificateIssued), a)
	ids = append(ids, r.event(t, sampleEvent(acme.EventCertificateIssued), b)...)
	for _, id := range ids {
		r.wait(t, id)
	}
	var got []string
	for _, d := range rcv.deliveries() {
		got = append(got, d.header.Get("Authorization"))
	}
	if strings.Join(got, ",") != "Bearer a,Bearer b" && strings.Join(got, ",") != "Bearer b,Bearer a" {
		t.Errorf("deliveries carried %q; want each profile's own token once", got)
	}

	same := b
	same.Scope = "a"
	err := notify.NewDeliverer(notify.Options{}).Register(a, same)
	if err == nil || !strings.Contains(err.Error(), "differ only in their secrets") || strings.Contains(err.Error(), "Bearer") {
		t.Errorf("Register of two destinations differing only in their token: %v; want a refusal naming no secret", err)
	}
}

// A job the previous release queued names its destination by the ID it
// computed then (a hash of every setting but the HMAC key and the SMTP
// password): after an upgrade it is delivered while the config is the
// same.
func TestAJobQueuedByThePreviousReleaseIsDeliveredAfterTheUpgrade(t *testing.T) {
	dst := notify.Destination{Type: notify.TypeWebhook, URL: "https://hooks.example.com/acme", Secret: "s3cret",
		Headers: map[string]string{"Authorization": "Bearer old-token"}}
	const previousID = "webhook-fc03008ed86c2661" // dst.ID() of the release before
	var sent []*http.Request
	d := notify.NewDeliverer(notify.Options{HTTPTransport: roundTrip(func(req *http.Request) (*http.Response, error) {
		sent = append(sent, req)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
	})})
	if err := d.Register(dst); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"destination": previousID, "via": "webhook hooks.example.com",
		"event": sampleEvent(acme.EventCertificateIssued)})
	out := d.Run(context.Background(), &jobs.Job{ID: 7, Kind: notify.Kind, Payload: payload})
	if out.Kind() != "done" || len(sent) != 1 || sent[0].Header.Get("Authorization") != "Bearer old-token" {
		t.Fatalf("outcome %s, %d requests; want one delivery", out, len(sent))
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
