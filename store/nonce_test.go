package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A signed request's nonce is spent with its account read (UseNonceAs): a
// fresh nonce with the account as stored, a used one refused without an
// account, and a fresh one of a missing account spent all the same.
func TestANonceSpentAsAnAccountReadsTheAccountOnlyWhenFresh(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		stored, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "tp", KeyJWK: []byte(`{"kty":"EC"}`),
			Contact: []string{"mailto:a@example.com"}, TOSAgreed: true}, t0)
		if err != nil {
			t.Fatal(err)
		}
		exp := t0.Add(time.Hour)
		for _, tc := range []struct {
			name, nonce, profile, account string
			wantFresh, wantAccount        bool
			wantErr                       error
		}{
			{"ok/a fresh nonce reads the account", "n1", "p", stored.ID, true, true, nil},
			{"fail/the same nonce again is not fresh and reads nothing", "n1", "p", stored.ID, false, false, nil},
			{"fail/a fresh nonce of a missing account is spent and says so", "n2", "p", "missing", true, false, ErrNotFound},
			{"fail/an account of another profile is missing", "n3", "q", stored.ID, true, false, ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				acct, fresh, err := db.UseNonceAs(ctx, tc.nonce, exp, tc.profile, tc.account)
				if fresh != tc.wantFresh || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
					t.Fatalf("UseNonceAs: fresh=%v err=%v; want fresh=%v err=%v", fresh, err, tc.wantFresh, tc.wantErr)
				}
				if tc.wantAccount {
					if acct.ID != stored.ID || acct.Thumbprint != "tp" || string(acct.KeyJWK) != `{"kty":"EC"}` || acct.Status != "valid" ||
						len(acct.Contact) != 1 || acct.Contact[0] != "mailto:a@example.com" || !acct.TOSAgreed || !acct.CreatedAt.Equal(t0) {
						t.Fatalf("UseNonceAs read %+v; want the stored account %+v", acct, stored)
					}
				} else if acct.ID != "" {
					t.Fatalf("UseNonceAs read account %q; want none", acct.ID)
				}
				// Whatever the answer, the nonce is spent now.
				if again, err := db.UseNonce(ctx, tc.nonce, exp); err != nil || again {
					t.Fatalf("the nonce after UseNonceAs: fresh=%v err=%v; want it spent", again, err)
				}
			})
		}
	})
}
