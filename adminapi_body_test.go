package caddyacmeproxy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// A route whose body says what to do (minting a key, renewing early)
// sent none says that the body is empty and what it must be, in the
// operator's words rather than the decoder's ("EOF").
func TestARouteThatNeedsABodyAndGotNoneSaysItIsEmpty(t *testing.T) {
	for _, route := range []string{"eab/create", "renew-early"} {
		t.Run(route, func(t *testing.T) {
			a := fuzzAdminAPI(t)
			r := httptest.NewRequest(http.MethodPost, adminBase+route, strings.NewReader(" \n"))
			err := a.serve(httptest.NewRecorder(), r)
			ae, ok := errors.AsType[caddy.APIError](err)
			if !ok || ae.HTTPStatus != http.StatusBadRequest {
				t.Fatalf("POST %s with no body: %v; want a 400", route, err)
			}
			if !strings.Contains(ae.Message, "the body is empty") || !strings.Contains(ae.Message, "{") || strings.Contains(ae.Message, "EOF") {
				t.Errorf("the message %q does not say the body is empty and what it must be", ae.Message)
			}
		})
	}
}
