package caddyacmeproxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

// failedOrderError finalizes the ready order o of names and returns the
// error the order failed with, as the client reads it.
func failedOrderError(t *testing.T, ctx context.Context, c *acme.Client, o *acme.Order, names ...string) *acme.Error {
	t.Helper()
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	if _, _, err := c.CreateOrderCert(fctx, o.FinalizeURL, relayCSR(t, names...), true); err == nil {
		t.Fatal("the order was issued; want it failed")
	}
	got, err := c.GetOrder(ctx, o.URI)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != acme.StatusInvalid || got.Error == nil {
		t.Fatalf("the order is %s with error %v; want invalid with an error", got.Status, got.Error)
	}
	return got.Error
}

// subproblemsOf is a client's subproblems as "type identifier: detail".
func subproblemsOf(e *acme.Error) []string {
	var out []string
	for _, sp := range e.Subproblems {
		id := "(no identifier)"
		if sp.Identifier != nil {
			id = sp.Identifier.Type + ":" + sp.Identifier.Value
		}
		out = append(out, strings.TrimPrefix(sp.Type, "urn:ietf:params:acme:error:")+" "+id+": "+sp.Detail)
	}
	return out
}

// An upstream CA may refuse an order with a problem whose subproblems say
// which names it refused, and why (RFC 8555 §6.7.1); Pebble does so
// for a name its policy forbids. The relay's client sees those of its
// own names among its order's error's subproblems, with the upstream's
// type and detail, and the order fails as they do: a compound problem
// whose subproblems all say caa is caa, one whose subproblems differ is
// compound; a subproblem naming a name not in the order, or about the
// relay's own answer, is not shown.
func TestAClientSeesTheUpstreamsSubproblemsAboutItsOwnNames(t *testing.T) {
	const caa, dns = "urn:ietf:params:acme:error:caa", "urn:ietf:params:acme:error:dns"
	tests := []struct {
		name string
		// refuse, when set, has the test's front refuse the relay's
		// finalize with subproblems about the order's names; else the
		// second name is on Pebble's own block list.
		refuse func(p *relayPebble, first, second string)
		// want is the type of the order's error, and wantSubs its
		// subproblems as subproblemsOf writes them.
		want     string
		wantSubs func(first, second string) []string
	}{
		{"ok/Pebble refuses a name its policy forbids", nil, "urn:ietf:params:acme:error:rejectedIdentifier",
			func(_, second string) []string {
				return []string{"rejectedIdentifier dns:" + second + ": " + second + " is a forbidden domain"}
			}},
		{"ok/every name's CAA records forbid the upstream", func(p *relayPebble, first, second string) {
			p.refuseNextWithSubproblems(pebbleFinalize, 1, http.StatusForbidden, "urn:ietf:params:acme:error:compound",
				"Error finalizing order :: Rechecking CAA for 2 identifiers failed. Refer to sub-problems for more information",
				frontSubproblem{caa, first, "CAA record for " + first + " prevents issuance"},
				frontSubproblem{caa, "stranger.example.org", "CAA record for example.org prevents issuance"},
				frontSubproblem{caa, second, "CAA record for " + second + " prevents issuance"})
		}, caa, func(first, second string) []string {
			return []string{"caa dns:" + first + ": CAA record for " + first + " prevents issuance",
				"caa dns:" + second + ": CAA record for " + second + " prevents issuance"}
		}},
		{"ok/the names fail for different reasons", func(p *relayPebble, first, second string) {
			p.refuseNextWithSubproblems(pebbleFinalize, 1, http.StatusForbidden, "urn:ietf:params:acme:error:compound",
				"Error finalizing order :: 2 identifiers failed",
				frontSubproblem{caa, first, "CAA record for " + first + " prevents issuance"},
				frontSubproblem{dns, second, "DNS problem: SERVFAIL looking up CAA for " + second})
		}, "urn:ietf:params:acme:error:compound", func(first, second string) []string {
			return []string{"caa dns:" + first + ": CAA record for " + first + " prevents issuance",
				"dns dns:" + second + ": DNS problem: SERVFAIL looking up CAA for " + second}
		}},
		{"ok/the upstream refuses only the relay's answers", func(p *relayPebble, first, second string) {
			p.refuseNextWithSubproblems(pebbleFinalize, 1, http.StatusForbidden, "urn:ietf:params:acme:error:compound",
				"Error finalizing order :: 2 identifiers failed",
				frontSubproblem{"urn:ietf:params:acme:error:unauthorized", first, "Incorrect TXT record"},
				frontSubproblem{caa, "stranger.example.org", "CAA record for example.org prevents issuance"})
		}, "urn:ietf:params:acme:error:serverInternal", func(string, string) []string { return nil }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			first, second := fmt.Sprintf("first%d.example.com", i), fmt.Sprintf("second%d.example.com", i)
			b := newRelayBench(t)
			if tt.refuse == nil {
				if err := b.pebble.store.AddBlockedDomain(second); err != nil {
					t.Fatal(err)
				}
			}
			p := b.start()
			c := p.client(t, ctx)
			o := b.readyOrder(t, ctx, c, first, second)
			if tt.refuse != nil {
				tt.refuse(b.pebble, first, second)
			}
			e := failedOrderError(t, ctx, c, o, first, second)
			if e.ProblemType != tt.want {
				t.Errorf("the order's error is %s: %s; want %s", e.ProblemType, e.Detail, tt.want)
			}
			if got, want := subproblemsOf(e), tt.wantSubs(first, second); !slices.Equal(got, want) {
				t.Errorf("the order's subproblems:\n %q\nwant\n %q", got, want)
			}
			if tt.refuse != nil && b.pebble.count(pebbleFinalize) != 1 {
				t.Errorf("the upstream was asked to finalize %d times; want once (a stated refusal is not retried)", b.pebble.count(pebbleFinalize))
			}
		})
	}
}
