package problem_test

import (
	"net/http"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

func TestARequestRefusedForItsIdentifiersIsTheFirstRefusalWithEachAsASubproblem(t *testing.T) {
	rejected := func(name string) *problem.Problem {
		return problem.RejectedIdentifierF("%s is not allowed", name).For(acme.IdentifierDNS, name)
	}
	caa := func(name string) *problem.Problem {
		return problem.CAAF("CAA of %s forbids issuance", name).For(acme.IdentifierDNS, name)
	}
	for _, tt := range []struct {
		name       string
		subs       []*problem.Problem
		wantType   acme.ProblemType
		wantStatus int
		wantDetail string
	}{
		{"one refusal is its own type and detail", []*problem.Problem{rejected("a.example")},
			acme.ErrorRejectedIdentifier, http.StatusBadRequest, "a.example is not allowed"},
		{"several take the several detail", []*problem.Problem{rejected("a.example"), rejected("b.example")},
			acme.ErrorRejectedIdentifier, http.StatusBadRequest, "several"},
		{"a caa refusal is forbidden", []*problem.Problem{caa("a.example"), rejected("b.example")},
			acme.ErrorCAA, http.StatusForbidden, "several"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := problem.IdentifiersRefused(tt.subs, "several")
			if p.Type != tt.wantType || p.Status != tt.wantStatus || p.Detail != tt.wantDetail {
				t.Errorf("%s %d %q; want %s %d %q", p.Type, p.Status, p.Detail, tt.wantType, tt.wantStatus, tt.wantDetail)
			}
			if p.Identifier != nil {
				t.Errorf("the top-level problem names %+v; want no identifier", p.Identifier)
			}
			if len(p.Subproblems) != len(tt.subs) || p.Subproblems[0].Identifier == nil {
				t.Errorf("subproblems %+v; want the %d refusals, each naming its identifier", p.Subproblems, len(tt.subs))
			}
			if tt.subs[0].Identifier == nil {
				t.Error("the first refusal lost its identifier: the top-level problem must be a copy")
			}
		})
	}
}
