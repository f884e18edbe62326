package caddyacmeproxy

import (
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTheAuditKeepsAnOperatorsNameWholeCharactersOnly(t *testing.T) {
	for _, tc := range []struct {
		name, header, want string
	}{
		{"a short name is kept as sent", "alice", "alice"},
		{"a long ASCII name is cut at 64 bytes", strings.Repeat("a", 70), strings.Repeat("a", 64)},
		{"a name cut inside a two-byte character loses that character", strings.Repeat("a", 63) + "é", strings.Repeat("a", 63)},
		{"a name cut inside a four-byte character loses that character", strings.Repeat("a", 62) + "😀", strings.Repeat("a", 62)},
		{"bytes that are not UTF-8 become the replacement character", "bob\xff", "bob\uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/acme_proxy/orders/x/revoke", nil)
			r.Header.Set(operatorHeader, tc.header)
			got := actorOf(r).ID
			if got != tc.want || !utf8.ValidString(got) {
				t.Errorf("actor id = %q, want %q", got, tc.want)
			}
		})
	}
}
