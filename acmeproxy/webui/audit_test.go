package webui

import (
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An audit row is shown alike wherever the page lists it (the audit
// search, the order's page, the overview's last failures): with the
// identifier it concerns — a challenge_failed or finalize_refused row is
// one identifier's, which nothing else on the row names — its problem type
// as an order's problem reads (without the ACME error namespace) and a
// revocation's code with its name. A reason that is no problem type (a
// refused binding's kid, which the client chose) is shown as recorded.
func TestAnAuditRowShowsItsIdentifierAndItsReasonAsAnOperatorReadsItOnEveryPage(t *testing.T) {
	f := newFixture(t, false)
	at := t0.Add(-time.Minute)
	evs := []store.AuditEvent{
		{At: at, Event: acme.EventChallengeFailed, Outcome: "failure", Profile: "test", ActorKind: "acme_account", ActorID: f.account,
			OrderID: f.order, AccountID: f.account, Identifiers: []acme.Identifier{{Type: "dns", Value: "second.example.test"}},
			Reason: string(acme.ErrorIncorrectResponse), Detail: "http-01: the response was wrong"},
		{At: at, Event: acme.EventCertificateRevoked, Outcome: "success", Profile: "test", ActorKind: "admin", OrderID: f.order,
			Identifiers: []acme.Identifier{{Type: "dns", Value: "www.example.test"}}, Serial: "0a", Reason: "4"},
		{At: at, Event: acme.EventAccountBindingRefused, Outcome: "refused", Profile: "test", ActorKind: "account_key", ActorID: "tp",
			Reason: "urn:ietf:params:acme:error:kid-the-client-chose", Detail: "no such key"},
	}
	if err := f.db.InsertAudits(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	challengeRow := "<td>second.example.test</td><td><code></code></td><td>incorrectResponse — http-01: the response was wrong</td>"
	tests := []struct {
		name string
		path string
		want []string
	}{
		{name: "the audit search", path: "/ops/audit", want: []string{challengeRow,
			"<td>www.example.test</td><td><code>0a</code></td><td>4 (superseded)</td>",
			"<td>urn:ietf:params:acme:error:kid-the-client-chose — no such key</td>"}},
		{name: "the order's page", path: "/ops/orders/order1", want: []string{challengeRow,
			"<td>www.example.test</td><td><code>0a</code></td><td>4 (superseded)</td>"}},
		{name: "the overview's last failures", path: "/ops/", want: []string{
			"<td>second.example.test</td><td>incorrectResponse — http-01: the response was wrong</td>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := f.get(t, tt.path).Body.String()
			for _, want := range tt.want {
				if !strings.Contains(body, want) {
					t.Errorf("%s lacks %s:\n%s", tt.path, want, body)
				}
			}
			if strings.Contains(body, string(acme.ErrorIncorrectResponse)) {
				t.Errorf("%s spells out the problem type's namespace", tt.path)
			}
		})
	}
}

// The overview's job queue shows, per kind, how long its longest waiting
// job has been due: recurring housekeeping scheduled for its next round
// (a row as old as the first start) and a job due later are not waiting.
func TestTheOverviewsOldestWaitingJobIsTheOneDueTheLongest(t *testing.T) {
	f := newFixture(t, false) // its notify_deliver job is due in an hour
	for _, j := range []store.NewJob{
		{Kind: "crl_refresh", Key: "crl_refresh", RunAt: t0.Add(time.Hour), MaxAttempts: 3},
		{Kind: "notify_deliver", RunAt: t0.Add(-10 * time.Minute), MaxAttempts: 3},
	} {
		if _, _, err := f.db.EnqueueJob(t.Context(), j, t0.Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	body := f.get(t, "/ops/").Body.String()
	for _, want := range []string{
		`crl_refresh</a></td><td><span class="status s-ready">ready</span></td><td class="n">1</td><td>—</td>`,
		`notify_deliver</a></td><td><span class="status s-ready">ready</span></td><td class="n">2</td><td>10m0s</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %s:\n%s", want, body)
		}
	}
}
