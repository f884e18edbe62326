package localca

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// loadLog is a Storage that records the keys it is asked to load.
type loadLog struct {
	memStorage
	mu   sync.Mutex
	keys []string
}

func (l *loadLog) Load(ctx context.Context, key string) ([]byte, error) {
	l.mu.Lock()
	l.keys = append(l.keys, key)
	l.mu.Unlock()
	return l.memStorage.Load(ctx, key)
}

func (l *loadLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := l.keys
	l.keys = nil
	return keys
}

// FuzzLookupCRLIssuer feeds any key id to LookupCRLIssuer, as a client's
// GET <prefix>/crl/<key id> reaches it: the key id is the client's, and
// picks a record in Caddy's storage. Whatever it is, only a record of
// this profile's issuers is read; a CA is found only by its own key id,
// and the two this profile issued from (the current one and a retired
// one, in storage only) are found; any other key id is unknown, never
// unavailable (which would be a 503 for a client's typo).
func FuzzLookupCRLIssuer(f *testing.F) {
	storage := &loadLog{}
	old := defaultCA(f)
	next := renewed(f, old, testNow.AddDate(0, -1, 0), testNow.AddDate(2, 0, 0))
	src := &rotating{ca: old}
	s := bound(f, newSigner(f, src.source, Options{Storage: storage}), "p")
	issue(f, s, issueRequest(f, newKey(f, "p256"), dns("old.example.com")))
	src.set(next)
	issue(f, s, issueRequest(f, newKey(f, "p256"), dns("new.example.com")))
	// A new process: the retired CA is only in storage.
	s = bound(f, newSigner(f, src.source, Options{Storage: storage}), "p")
	known := map[string]bool{signer.CAKeyID(old.inter): true, signer.CAKeyID(next.inter): true}
	dir := path.Join(issuersDir, "p")

	for id := range known {
		f.Add(id)
		f.Add(strings.ToUpper(id))
		f.Add(id + "\n")
		f.Add("name:" + id)
		f.Add(id[:len(id)-1])
	}
	for _, id := range []string{"", "00", "name:00", "../p/00", "..%2f00", "00/../../x", "name:name:00", "name-00", "0", strings.Repeat("0", 130)} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, keyID string) {
		storage.take()
		info, err := s.LookupCRLIssuer(context.Background(), keyID)
		for _, key := range storage.take() {
			if path.Dir(key) != dir || path.Clean(key) != key || strings.Count(path.Base(key), ".") != 1 {
				t.Fatalf("key id %q: read %q from storage, outside %s", keyID, key, dir)
			}
		}
		switch {
		case err == nil && info.KeyID != keyID:
			t.Fatalf("key id %q: found the CA with key id %q", keyID, info.KeyID)
		case err == nil && !known[keyID]:
			t.Fatalf("key id %q: found a CA this profile did not issue from", keyID)
		case err != nil && known[keyID]:
			t.Fatalf("key id %q: a CA this profile issued from is not found: %v", keyID, err)
		case err != nil && (!errors.Is(err, signer.ErrIssuerUnknown) || errors.Is(err, signer.ErrIssuerUnavailable)):
			t.Fatalf("key id %q: %v; want it unknown", keyID, err)
		}
	})
}
