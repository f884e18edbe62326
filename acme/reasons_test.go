package acme

import "testing"

func TestEveryAssignedCRLReasonHasItsRFC5280NameAndTheOthersNone(t *testing.T) {
	tests := []struct {
		code int
		want string
	}{
		{ReasonUnspecified, "unspecified"}, {ReasonKeyCompromise, "keyCompromise"}, {ReasonCACompromise, "cACompromise"},
		{ReasonAffiliationChanged, "affiliationChanged"}, {ReasonSuperseded, "superseded"},
		{ReasonCessationOfOperation, "cessationOfOperation"}, {ReasonCertificateHold, "certificateHold"},
		{7, ""}, {ReasonRemoveFromCRL, "removeFromCRL"}, {ReasonPrivilegeWithdrawn, "privilegeWithdrawn"},
		{ReasonAACompromise, "aACompromise"}, {11, ""}, {-1, ""},
	}
	for _, tt := range tests {
		if got := ReasonName(tt.code); got != tt.want {
			t.Errorf("ReasonName(%d) = %q, want %q", tt.code, got, tt.want)
		}
	}
}
