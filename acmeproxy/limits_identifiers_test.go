package acmeproxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
)

// The identifier bounds of a new-order (max_identifiers, the
// pending_authorizations cap, the bound of what an order may hold) count
// the identifiers the order is stored with: after normalization (case,
// IPv4-mapped addresses) and de-duplication (RFC 8555 §7.4), not the
// entries the client sent. An order whose entries collapse to as many
// identifiers as the bound allows is stored; one that collapses to more
// is refused naming how many it would have had.
func TestTheIdentifierBoundsCountAnOrdersIdentifiersAsStoredNotAsSent(t *testing.T) {
	// An order as large as an order may be, and one of its names again in
	// upper case: the entries are past the bound, the identifiers not.
	var bound, boundTwice []map[string]string
	var boundValues []string
	for i := range maxIdentifiers {
		v := fmt.Sprintf("n%d.example", i)
		bound, boundValues = append(bound, dnsID(v)), append(boundValues, v)
	}
	boundTwice = append(slices.Clone(bound), dnsID("N0.EXAMPLE"))
	tests := []struct {
		name   string
		set    func(*LimitsConfig)
		ids    []map[string]string
		stored []string // the order's identifier values, in order; nil for a refusal
	}{
		{"ok/a name sent twice is one identifier under max_identifiers",
			func(l *LimitsConfig) { l.MaxIdentifiers = limitCap(1) },
			[]map[string]string{dnsID("a.example.com"), dnsID("a.example.com")}, []string{"a.example.com"}},
		{"ok/a name in two cases is one identifier under max_identifiers",
			func(l *LimitsConfig) { l.MaxIdentifiers = limitCap(2) },
			[]map[string]string{dnsID("a.example.com"), dnsID("A.EXAMPLE.com"), dnsID("b.example.com")}, []string{"a.example.com", "b.example.com"}},
		{"ok/an address and its IPv4-mapped form are one identifier under max_identifiers",
			func(l *LimitsConfig) { l.MaxIdentifiers = limitCap(1) },
			[]map[string]string{ipID("10.0.0.1"), ipID("::ffff:10.0.0.1")}, []string{"10.0.0.1"}},
		{"ok/a name sent twice is one authorization under the pending_authorizations cap",
			func(l *LimitsConfig) { l.PendingAuthorizations = limitCap(1) },
			[]map[string]string{dnsID("a.example.com"), dnsID("A.example.com")}, []string{"a.example.com"}},
		{"ok/entries past the bound of an order that collapse to the bound are stored",
			func(l *LimitsConfig) {
				l.MaxIdentifiers = &LimitConfig{Off: true}
				l.PendingAuthorizations = limitCap(maxIdentifiers)
			},
			boundTwice, boundValues},
		{"fail/distinct names over max_identifiers after de-duplication are refused",
			func(l *LimitsConfig) { l.MaxIdentifiers = limitCap(1) },
			[]map[string]string{dnsID("a.example.com"), dnsID("a.example.com"), dnsID("b.example.com")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, _, _ := limitEnv(t, tc.set)
			c := e.rawClient()
			c.register()
			r := c.post(e.url("/new-order"), map[string]any{"identifiers": tc.ids}, jwsOpts{})
			if tc.stored == nil {
				wantProblem(t, r, http.StatusBadRequest, vocab.ErrorRejectedIdentifier)
				if want := "not 2"; !strings.Contains(r.problem.Detail, want) {
					t.Errorf("detail %q does not count the identifiers the order would have had (%q)", r.problem.Detail, want)
				}
				return
			}
			if r.status != http.StatusCreated {
				t.Fatalf("new-order of %d entries: %d %s; want 201", len(tc.ids), r.status, r.body)
			}
			o := decodeAs[orderJSON](t, r)
			var got []string
			for _, id := range o.Identifiers {
				got = append(got, id.Value)
			}
			if !slices.Equal(got, tc.stored) || len(o.Authorizations) != len(tc.stored) {
				t.Errorf("the order holds %d identifiers and %d authorizations; want %d", len(got), len(o.Authorizations), len(tc.stored))
			}
		})
	}
}
