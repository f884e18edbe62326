package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestDescribeGivesEachOperatorErrorItsStatusAndAMessageInTheOperatorsTerms(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantMsg    string
	}{
		{"an unknown order", fmt.Errorf("%w: order nope", store.ErrNotFound), http.StatusNotFound, "not found: order nope"},
		{"a bad filter", fmt.Errorf("%w: status %q is not one of valid", ErrInvalid, "x"), http.StatusBadRequest,
			`invalid request: status "x" is not one of valid`},
		{"a settled job", fmt.Errorf("%w: %w", ErrConflict, fmt.Errorf("%w: cannot cancel job 5: it is done", store.ErrWrongState)),
			http.StatusConflict, "conflict: cannot cancel job 5: it is done"},
		{"a live duplicate", fmt.Errorf("%w: %w", ErrConflict, fmt.Errorf("%w: job 5: another job with its kind and key is live", store.ErrConflict)),
			http.StatusConflict, "conflict: job 5: another job with its kind and key is live"},
		{"a profile elsewhere", fmt.Errorf("%w: internal (order x)", ErrNotMounted), http.StatusServiceUnavailable,
			"profile not mounted in this process: internal (order x)"},
		{"a database that cannot take writes", fmt.Errorf("%w: disk full", store.ErrUnavailable), http.StatusServiceUnavailable,
			"the database cannot take writes or does not answer now; retry later"},
		{"a database that did not answer in time", fmt.Errorf("store: order x: %w", context.DeadlineExceeded), http.StatusServiceUnavailable,
			"the database cannot take writes or does not answer now; retry later"},
		{"a CA key that cannot be read now", fmt.Errorf("%w: %w: reading CA 1b from storage: storage backend unreachable",
			errors.New("no CRL can list the revocation"), signer.ErrIssuerUnavailable), http.StatusServiceUnavailable,
			"the issuing CA's key cannot be reached now, so nothing was changed; retry later"},
		{"a backend that gave up", fmt.Errorf("%w: job 7 is failed: connection refused", ErrBackendFailed), http.StatusBadGateway,
			"backend failed: job 7 is failed: connection refused"},
		{"a server fault", errors.New("disk on fire"), 0, "disk on fire"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, msg := Describe(tc.err)
			if status != tc.wantStatus || msg != tc.wantMsg {
				t.Errorf("Describe = %d %q; want %d %q", status, msg, tc.wantStatus, tc.wantMsg)
			}
		})
	}
}
