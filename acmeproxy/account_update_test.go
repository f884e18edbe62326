package acmeproxy

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// RFC 8555 §7.3.2: an account update MUST ignore termsOfServiceAgreed
// (agreement is given at creation, §7.3.3), but a value of another JSON
// type than boolean is a malformed request, as it is in newAccount: the
// update is refused whole, its contact change included, and says why.
func TestAnAccountUpdateIgnoresTermsOfServiceAgreedButNotAValueOfTheWrongType(t *testing.T) {
	e := newTestEnv(t, nil)
	old := []string{"mailto:old@example.com"}
	changed := []string{"mailto:new@example.com"}
	tests := []struct {
		name        string
		payload     string
		wantType    acme.ProblemType // "" when the update is answered 200
		wantDetail  string
		wantContact []string
	}{
		{name: "fail/a string", payload: `{"termsOfServiceAgreed":"true","contact":["mailto:new@example.com"]}`,
			wantType: acme.ErrorMalformed, wantDetail: `has a string where "termsOfServiceAgreed" takes a boolean`, wantContact: old},
		{name: "fail/a number", payload: `{"termsOfServiceAgreed":1,"contact":["mailto:new@example.com"]}`,
			wantType: acme.ErrorMalformed, wantDetail: `has a number where "termsOfServiceAgreed" takes a boolean`, wantContact: old},
		{name: "fail/an object", payload: `{"termsOfServiceAgreed":{}}`,
			wantType: acme.ErrorMalformed, wantDetail: `has an object where "termsOfServiceAgreed" takes a boolean`, wantContact: old},
		{name: "ok/false is ignored and the contact changes", payload: `{"termsOfServiceAgreed":false,"contact":["mailto:new@example.com"]}`,
			wantContact: changed},
		{name: "ok/true is ignored", payload: `{"termsOfServiceAgreed":true}`, wantContact: old},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := e.rawClient()
			c.registerWith(map[string]any{"termsOfServiceAgreed": true, "contact": old})
			r := c.post(c.kid, []byte(tc.payload), jwsOpts{})
			if tc.wantType != "" {
				wantProblem(t, r, http.StatusBadRequest, tc.wantType)
				if !strings.Contains(r.problem.Detail, tc.wantDetail) {
					t.Errorf("detail %q; want it to say %q", r.problem.Detail, tc.wantDetail)
				}
			} else if r.status != http.StatusOK {
				t.Fatalf("update: %d %s", r.status, r.body)
			}
			read := decodeAs[accountJSON](t, c.read(c.kid))
			if read.Status != acme.StatusValid || !read.TermsOfServiceAgreed || !slices.Equal(read.Contact, tc.wantContact) {
				t.Errorf("account is now %s, agreed %v, contact %q; want valid, agreed, %q",
					read.Status, read.TermsOfServiceAgreed, read.Contact, tc.wantContact)
			}
		})
	}
}

// RFC 8555 §7.3.2: the server MUST ignore the fields of an account update
// it does not recognize, orders among them. JSON member names are
// case-sensitive: "Status" is not "status", and a deactivation, which
// cannot be undone, is asked only by the member the RFC names. A member
// sent twice is refused, not read as whichever came last.
func TestAnAccountUpdateIgnoresMembersItDoesNotKnowWhateverTheirCase(t *testing.T) {
	e := newTestEnv(t, nil)
	old := []string{"mailto:old@example.com"}
	tests := []struct {
		name     string
		payload  string
		wantType acme.ProblemType // "" when the update is answered 200
	}{
		{name: "ok/Status is not status", payload: `{"Status":"deactivated"}`},
		{name: "ok/STATUS is not status", payload: `{"STATUS":"deactivated"}`},
		{name: "ok/Contact is not contact", payload: `{"Contact":["mailto:new@example.com"]}`},
		{name: "ok/orders is ignored", payload: `{"orders":"https://elsewhere.example/orders"}`},
		{name: "ok/an unknown member is ignored", payload: `{"unknown":{"status":"deactivated"}}`},
		{name: "fail/status twice", payload: `{"status":"valid","status":"deactivated"}`, wantType: acme.ErrorMalformed},
		{name: "fail/contact twice", payload: `{"contact":["mailto:old@example.com"],"contact":["mailto:new@example.com"]}`, wantType: acme.ErrorMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := e.rawClient()
			c.registerWith(map[string]any{"termsOfServiceAgreed": true, "contact": old})
			r := c.post(c.kid, []byte(tc.payload), jwsOpts{})
			if tc.wantType != "" {
				wantProblem(t, r, http.StatusBadRequest, tc.wantType)
			} else if r.status != http.StatusOK {
				t.Fatalf("update: %d %s", r.status, r.body)
			}
			read := decodeAs[accountJSON](t, c.read(c.kid))
			if read.Status != acme.StatusValid || !slices.Equal(read.Contact, old) {
				t.Errorf("account is now %s with contact %q; want it unchanged, valid with %q", read.Status, read.Contact, old)
			}
		})
	}
}
