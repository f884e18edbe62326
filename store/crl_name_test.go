package store

import (
	"context"
	"testing"
	"time"
)

func TestCRLNumbersIncreasePerIssuerNameAcrossItsKeys(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		// A counter left by a version that numbered CRLs per key only.
		if _, err := rawW(db).ExecContext(ctx, `INSERT INTO crl_numbers (issuer_key_id, last) VALUES ('upgraded', 41)`); err != nil {
			t.Fatal(err)
		}
		build := func(int64, []CRLEntry) ([]byte, time.Time, time.Time, error) {
			return []byte{1}, t0, t0.Add(time.Hour), nil
		}
		steps := []struct {
			step      string
			key, name string
			want      int64
		}{
			{"ok/a CA's first CRL is number 1", "key-a", "CN=Intermediate", 1},
			{"ok/its next is 2", "key-a", "CN=Intermediate", 2},
			{"ok/the CA renewed with a new key under its name continues at 3", "key-b", "CN=Intermediate", 3},
			{"ok/the retired key, still publishing, continues the name's sequence", "key-a", "CN=Intermediate", 4},
			{"ok/the renewed key again", "key-b", "CN=Intermediate", 5},
			{"ok/another name has its own sequence", "key-c", "CN=Other", 1},
			{"ok/a key numbered before names were counted continues its own sequence", "upgraded", "CN=Upgraded", 42},
			{"ok/and a new key under its name continues from there", "key-d", "CN=Upgraded", 43},
		}
		for _, s := range steps {
			crl, err := db.PublishCRL(ctx, s.key, s.name, t0, build)
			if err != nil {
				t.Fatalf("%s: %v", s.step, err)
			}
			if crl.Number != s.want {
				t.Errorf("%s: cRLNumber %d; want %d", s.step, crl.Number, s.want)
			}
			if got, err := db.GetCRL(ctx, s.key); err != nil || got.Number != s.want {
				t.Errorf("%s: stored CRL %d, %v; want %d", s.step, got.Number, err, s.want)
			}
		}
		if _, err := db.PublishCRL(ctx, "key-e", "", t0, build); err == nil {
			t.Error("a CRL was published without its issuer's name")
		}
	})
}
