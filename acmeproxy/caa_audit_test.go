package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A finalize the CAA records refuse, checked again since the validation
// is older than 7 hours, is audited as every refusal is: a
// finalize_refused row per refused identifier, of the order and its
// account, with the client's address, the problem type as its reason and
// a detail quoting the records that refused it — the issuers they name.
// An identifier the records allow has no row, and the finalize that
// succeeds once the records are fixed adds none.
func TestAFinalizeRefusedByCAAIsAuditedPerIdentifierWithTheRecordsIssuers(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e, d, clk := caaEnv(t)
		alice := e.rawClient()
		alice.register()
		account := path.Base(alice.kid)
		pinned, closed, broken, allowed := "pinned.audit."+caaTestZone, "closed.audit."+caaTestZone, "broken.audit."+caaTestZone, "ok.audit."+caaTestZone
		names := []string{pinned, closed, broken, allowed}
		o := alice.readyOrder(names...)
		d.AddCAA(pinned, 0, "issue", "other-ca.example")
		d.AddCAA(pinned, 0, "issue", "third-ca.example")
		d.AddCAA(closed, 0, "issue", ";")
		d.SetRcode(broken, dns.RcodeServerFailure)
		clk.Advance(authority.CAARecheckAfter + time.Minute)

		if r := alice.finalize(o, newCSR(t, newKey(t), "", names, nil)); r.status < 400 || r.problem == nil {
			t.Fatalf("finalize refused by CAA: %d %s; want a problem", r.status, r.body)
		}
		rows := func() []store.AuditEvent {
			t.Helper()
			evs, err := e.db.SearchAudit(ctx, store.AuditFilter{Event: acme.EventFinalizeRefused})
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		want := map[string]struct {
			reason acme.ProblemType
			quotes []string
		}{
			pinned: {acme.ErrorCAA, []string{`0 issue "other-ca.example"`, `0 issue "third-ca.example"`}},
			closed: {acme.ErrorCAA, []string{`0 issue ";"`}},
			broken: {acme.ErrorDNS, []string{"SERVFAIL"}},
		}
		evs := rows()
		var got []string
		for _, ev := range evs {
			if len(ev.Identifiers) != 1 {
				t.Errorf("row %+v names %d identifiers, want the one refused", ev, len(ev.Identifiers))
				continue
			}
			name := ev.Identifiers[0].Value
			got = append(got, name)
			w, ok := want[name]
			if !ok {
				t.Errorf("a finalize_refused row for %s, which the records allow", name)
				continue
			}
			if ev.Outcome != authority.OutcomeRefused || ev.OrderID != path.Base(o.url) || ev.AccountID != account ||
				ev.ActorKind != authority.ActorAccount || ev.ActorID != account || ev.ClientIP == "" || ev.Serial != "" {
				t.Errorf("%s: row %+v; want a refusal of order %s by account %s from the client's address, naming no serial",
					name, ev, path.Base(o.url), account)
			}
			if ev.Reason != string(w.reason) {
				t.Errorf("%s: reason %q, want %q", name, ev.Reason, w.reason)
			}
			for _, q := range w.quotes {
				if !strings.Contains(ev.Detail, q) {
					t.Errorf("%s: detail %q does not quote %s", name, ev.Detail, q)
				}
			}
		}
		slices.Sort(got)
		if wantNames := []string{broken, closed, pinned}; !slices.Equal(got, wantNames) {
			t.Fatalf("finalize_refused rows for %v, want one for each of %v", got, wantNames)
		}

		for _, n := range []string{pinned, closed} {
			d.ClearCAA(n)
			d.AddCAA(n, 0, "issue", caaTestIdentity)
		}
		d.SetRcode(broken, dns.RcodeSuccess)
		if r := alice.finalize(o, newCSR(t, newKey(t), "", names, nil)); r.status != http.StatusOK {
			t.Fatalf("finalize after the records are fixed: %d %s", r.status, r.body)
		}
		alice.await(o.url, "valid")
		if n := len(rows()); n != len(evs) {
			t.Errorf("%d finalize_refused rows after the finalize that succeeded, want still %d", n, len(evs))
		}
	})
}

// A client finalizing again and again while the records still refuse its
// order (which stays ready) does not grow the audit trail: the same
// refusal of an identifier of an order is one row, and only a different
// one — the records changed — is a row of its own.
func TestAFinalizeRefusedByCAAAgainForTheSameReasonAddsNoAuditRow(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e, d, clk := caaEnv(t)
		alice := e.rawClient()
		alice.register()
		name := "loop.audit." + caaTestZone
		o := alice.readyOrder(name)
		d.AddCAA(name, 0, "issue", "other-ca.example")
		clk.Advance(authority.CAARecheckAfter + time.Minute)
		rows := func() int {
			t.Helper()
			evs, err := e.db.SearchAudit(ctx, store.AuditFilter{Event: acme.EventFinalizeRefused})
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}
		for range 5 {
			if r := alice.finalize(o, newCSR(t, newKey(t), "", []string{name}, nil)); r.problem == nil || r.problem.Type != acme.ErrorCAA {
				t.Fatalf("finalize refused by CAA: %d %s; want a caa problem", r.status, r.body)
			}
		}
		if n := rows(); n != 1 {
			t.Fatalf("%d finalize_refused rows after five finalizes refused alike; want 1", n)
		}
		d.ClearCAA(name)
		d.AddCAA(name, 0, "issue", "third-ca.example")
		if r := alice.finalize(o, newCSR(t, newKey(t), "", []string{name}, nil)); r.problem == nil || r.problem.Type != acme.ErrorCAA {
			t.Fatalf("finalize refused by other records: %d %s; want a caa problem", r.status, r.body)
		}
		if n := rows(); n != 2 {
			t.Fatalf("%d finalize_refused rows after the records changed; want 2, one per refusal", n)
		}
	})
}
