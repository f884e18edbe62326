package acme

import "testing"

func TestAProblemTypesShortNameIsItsNameWithoutTheACMEErrorNamespace(t *testing.T) {
	tests := []struct {
		name string
		typ  ProblemType
		want string
	}{
		{"ok/an ACME error type", ErrorBadCSR, "badCSR"},
		{"ok/one of the profiles draft", ErrorInvalidProfile, "invalidProfile"},
		{"ok/a type outside the namespace is kept whole", "about:blank", "about:blank"},
		{"ok/the namespace alone is empty", "urn:ietf:params:acme:error:", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.typ.Short(); got != tt.want {
				t.Errorf("%q.Short() = %q, want %q", tt.typ, got, tt.want)
			}
		})
	}
}
