package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mholt/acmez/v3/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// sub is an upstream's subproblem of type typ about the DNS name value.
func sub(typ, value, detail string) acme.Subproblem {
	return acme.Subproblem{Problem: acme.Problem{Type: typ, Detail: detail}, Identifier: acme.Identifier{Type: "dns", Value: value}}
}

func dnsIDs(names ...string) []vocab.Identifier {
	out := make([]vocab.Identifier, len(names))
	for i, n := range names {
		out[i] = vocab.Identifier{Type: vocab.IdentifierDNS, Value: n}
	}
	return out
}

// An upstream's refusal with subproblems (RFC 8555 §6.7.1) is told to
// the client about its own identifiers: each subproblem that names one
// of the order's, of a type the client can act on, with the upstream's
// detail and the identifier as the order holds it; one about another
// name, or about the relay's own requests, is left out. A compound
// problem fails the order as its subproblems do: of their type when
// they agree, compound when they differ, the generic failure when none
// is the client's.
func TestAnUpstreamsSubproblemsAreToldToTheClientAboutItsOwnIdentifiers(t *testing.T) {
	r := newSecrets("https://relay:pa55word@ca.example:14000/dir?token=s3cretToken", "")
	ids := append(dnsIDs("a.example.com", "b.example.com"), vocab.Identifier{Type: vocab.IdentifierIP, Value: "2001:db8::1"})
	caaA := signer.Subproblem{Kind: signer.KindCAA, Detail: "CAA record for a.example.com prevents issuance", Identifier: ids[0]}
	caaB := signer.Subproblem{Kind: signer.KindCAA, Detail: "CAA record for example.com prevents issuance", Identifier: ids[1]}
	dnsB := signer.Subproblem{Kind: signer.KindDNS, Detail: "SERVFAIL looking up CAA for b.example.com", Identifier: ids[1]}
	tests := []struct {
		name        string
		problem     acme.Problem
		wantKind    signer.Kind
		wantDetail  string
		wantSubs    []signer.Subproblem
		wantReasons []string // in the operator's reason
	}{
		{"ok/a compound of CAA refusals fails the order as caa",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "Rechecking CAA failed for 2 identifiers", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail), sub(acme.ProblemTypeCAA, "b.example.com", caaB.Detail)}},
			signer.KindCAA, "the upstream CA refused: Rechecking CAA failed for 2 identifiers", []signer.Subproblem{caaA, caaB}, nil},
		{"ok/a compound of one refusal reads as that name's",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "see the subproblems", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail)}},
			signer.KindCAA, "the upstream CA could not validate a.example.com: " + caaA.Detail, []signer.Subproblem{caaA}, nil},
		{"ok/a compound of refusals of different types stays compound",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "2 identifiers failed", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail), sub(acme.ProblemTypeDNS, "b.example.com", dnsB.Detail)}},
			signer.KindCompound, "the upstream CA refused: 2 identifiers failed", []signer.Subproblem{caaA, dnsB}, nil},
		{"ok/the upstream's spelling of a name finds the order's",
			acme.Problem{Type: acme.ProblemTypeCompound, Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "A.Example.COM.", caaA.Detail),
				{Problem: acme.Problem{Type: acme.ProblemTypeConnection, Detail: "timeout"}, Identifier: acme.Identifier{Type: "ip", Value: "2001:DB8:0::1"}}}},
			signer.KindCompound, "the upstream CA refused: no detail given",
			[]signer.Subproblem{caaA, {Kind: signer.KindConnection, Detail: "timeout", Identifier: ids[2]}}, nil},
		{"ok/a subproblem about another name is left out",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "CAA", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "stranger.example.org", "CAA record for example.org prevents issuance"),
				sub(acme.ProblemTypeCAA, "example.com", "CAA of the parent"),
				{Problem: acme.Problem{Type: acme.ProblemTypeCAA, Detail: "about no identifier"}},
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail)}},
			signer.KindCAA, "the upstream CA could not validate a.example.com: " + caaA.Detail, []signer.Subproblem{caaA},
			[]string{"stranger.example.org"}},
		{"ok/a subproblem about the relay's own answer is the operator's",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "2 failed", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeUnauthorized, "b.example.com", "Incorrect TXT record"),
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail)}},
			signer.KindCAA, "the upstream CA could not validate a.example.com: " + caaA.Detail, []signer.Subproblem{caaA},
			[]string{"Incorrect TXT record"}},
		{"ok/a compound none of whose subproblems is the client's is the generic failure",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "2 failed", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeUnauthorized, "b.example.com", "Incorrect TXT record"),
				sub(acme.ProblemTypeCAA, "stranger.example.org", "CAA")}},
			0, "", nil, nil},
		{"ok/a refused name keeps its type and the subproblems say which",
			acme.Problem{Type: acme.ProblemTypeRejectedIdentifier, Detail: "Order included an identifier for which issuance is forbidden by policy", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeRejectedIdentifier, "b.example.com", "b.example.com is a forbidden domain")}},
			signer.KindRejectedIdentifier, "",
			[]signer.Subproblem{{Kind: signer.KindRejectedIdentifier, Detail: "b.example.com is a forbidden domain", Identifier: ids[1]}}, nil},
		{"ok/a refusal of the relay's own request shows no subproblem",
			acme.Problem{Type: acme.ProblemTypeUnauthorized, Detail: "account not allowed", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail)}},
			0, "", nil, nil},
		{"ok/one subproblem per identifier and type",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "CAA", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "a.example.com", caaA.Detail), sub(acme.ProblemTypeCAA, "a.example.com.", "again")}},
			signer.KindCAA, "the upstream CA could not validate a.example.com: " + caaA.Detail, []signer.Subproblem{caaA}, nil},
		{"ok/a subproblem's detail keeps no secret nor the upstream's URLs",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "CAA", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeCAA, "a.example.com", "CAA for account https://ca.example:14000/acct/7 (token s3cretToken, pa55word)")}},
			signer.KindCAA, "the upstream CA could not validate a.example.com: CAA for account (an upstream URL) (token REDACTED, REDACTED)",
			[]signer.Subproblem{{Kind: signer.KindCAA, Detail: "CAA for account (an upstream URL) (token REDACTED, REDACTED)", Identifier: ids[0]}}, nil},
		{"ok/a subproblem's long detail is cut",
			acme.Problem{Type: acme.ProblemTypeCompound, Detail: "CAA", Subproblems: []acme.Subproblem{
				sub(acme.ProblemTypeDNS, "b.example.com", strings.Repeat("y", 3*maxSubproblemDetail)), sub(acme.ProblemTypeCAA, "a.example.com", "")}},
			signer.KindCompound, "the upstream CA refused: CAA",
			[]signer.Subproblem{{Kind: signer.KindDNS, Detail: strings.Repeat("y", maxSubproblemDetail-len("…")) + "…", Identifier: ids[1]},
				{Kind: signer.KindCAA, Detail: "no detail given", Identifier: ids[0]}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, how := range []struct {
				name string
				err  error
			}{
				{"answered", fmt.Errorf("finalizing the upstream order: %w", tt.problem)},
				{"the upstream order's error", permanent("the upstream order is invalid: %w", problemErr(&tt.problem))},
			} {
				f := r.classifyFor(how.err, response{status: http.StatusForbidden}, ids)
				if f.verdict != giveUp || f.refusal != tt.wantKind || f.refusalDetail != tt.wantDetail {
					t.Errorf("%s: %s, refusal %d %q; want give up, refusal %d %q", how.name, f.verdict, f.refusal, f.refusalDetail, tt.wantKind, tt.wantDetail)
				}
				if !slices.Equal(f.subproblems, tt.wantSubs) {
					t.Errorf("%s: the client's subproblems\n %+v\nwant\n %+v", how.name, f.subproblems, tt.wantSubs)
				}
				for _, s := range tt.wantReasons {
					if !strings.Contains(f.reason, s) {
						t.Errorf("%s: the operator's reason %q does not say %q", how.name, f.reason, s)
					}
				}
			}
		})
	}
}

// An upstream may send any number of subproblems, each as long as it
// likes: the client is shown at most maxSubproblems, the operator's
// reason is cut at maxReason, and neither grows with what was sent.
func TestAnUpstreamsSubproblemsAreBounded(t *testing.T) {
	var names []string
	for i := range 3 * maxSubproblems {
		names = append(names, fmt.Sprintf("n%d.example.com", i))
	}
	p := acme.Problem{Type: acme.ProblemTypeCompound, Detail: "many"}
	for range 2 {
		for _, n := range names {
			p.Subproblems = append(p.Subproblems, sub(acme.ProblemTypeCAA, n, strings.Repeat("z", 1024)))
		}
	}
	f := noSecrets.classifyFor(fmt.Errorf("finalizing: %w", p), response{status: http.StatusForbidden}, dnsIDs(names...))
	if f.refusal != signer.KindCAA || len(f.subproblems) != maxSubproblems {
		t.Fatalf("refusal %d with %d subproblems; want caa with %d", f.refusal, len(f.subproblems), maxSubproblems)
	}
	for i, sp := range f.subproblems {
		if len(sp.Detail) > maxSubproblemDetail || sp.Identifier.Value != names[i] {
			t.Fatalf("subproblem %d is about %s with a detail of %d bytes; want %s, at most %d", i, sp.Identifier.Value, len(sp.Detail), names[i], maxSubproblemDetail)
		}
	}
	if len(f.reason) > maxReason {
		t.Errorf("the operator's reason is %d bytes; want at most %d", len(f.reason), maxReason)
	}
}

// Through the signer: an upstream that answers the relay's newOrder with
// a compound problem of CAA subproblems has the order refused as caa,
// with a subproblem for each of the client's names it named.
func TestAnUpstreamsCompoundRefusalReachesTheSettlerWithItsSubproblems(t *testing.T) {
	ctx := context.Background()
	const name = "refused.example.com"
	up := registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": acme.ProblemTypeCompound, "detail": "Cannot issue for 2 identifiers", "status": 403,
			"subproblems": []map[string]any{
				{"type": acme.ProblemTypeCAA, "detail": "CAA record for example.com prevents issuance", "identifier": map[string]string{"type": "dns", "value": name}},
				{"type": acme.ProblemTypeCAA, "detail": "CAA record for example.org prevents issuance", "identifier": map[string]string{"type": "dns", "value": "stranger.example.org"}},
			}})
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.refused(ctx, t, name, "")
	b.settler.mu.Lock()
	defer b.settler.mu.Unlock()
	want := []signer.Subproblem{{Kind: signer.KindCAA, Detail: "CAA record for example.com prevents issuance", Identifier: vocab.Identifier{Type: "dns", Value: name}}}
	if got := b.settler.refused[req.OrderID]; got != signer.KindCAA {
		t.Errorf("the order failed with refusal %d; want caa (%d)", got, signer.KindCAA)
	}
	if got := b.settler.refusedSubs[req.OrderID]; !slices.Equal(got, want) {
		t.Errorf("the refusal's subproblems\n %+v\nwant\n %+v", got, want)
	}
}
