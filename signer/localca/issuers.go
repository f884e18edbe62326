package localca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Storage is where a Signer keeps every issuing CA it has signed with:
// its certificate chain and its private key. Caddy's storage
// (certmagic.Storage) satisfies it.
//
// Why there, and not in the database beside the revocation ledger: it is
// where Caddy itself keeps its CA keys (pki/authorities/<id>/*.key, in
// plaintext PEM), so a retired intermediate's key sits beside the current
// one, protected and shared exactly as that one is — who can read either
// could already read both. The database, on the other hand, is read by the
// admin API, copied by operators to inspect orders and audit rows, and
// backed up for its history; keeping CA keys out of it means none of those
// copies can sign. (The relay signer keeps its upstream account key in
// Caddy storage for the same reason.) The cost is a second place to back
// up: a database restored without the storage it was used with cannot
// publish the CRLs of CAs retired since, and revocations of their leaves
// are refused until the storage is back.
type Storage interface {
	Store(ctx context.Context, key string, value []byte) error
	Load(ctx context.Context, key string) ([]byte, error)
	List(ctx context.Context, path string, recursive bool) ([]string, error)
}

// keptIssuer is an issuing CA as remembered: its chain and key, and what
// the ACME layer is told about it.
type keptIssuer struct {
	iss  Issuer
	info signer.IssuerInfo
}

func keep(iss Issuer) keptIssuer {
	ca := iss.Chain[0]
	return keptIssuer{iss: iss, info: signer.IssuerInfo{
		KeyID: signer.CAKeyID(ca), NameID: signer.CANameID(ca), Subject: ca.Subject.String(), NotAfter: ca.NotAfter,
	}}
}

// issuerBook remembers the issuing CAs a Signer has signed with, one
// record per CA at acme_proxy/issuers/<profile>/<key id>.pem in Storage:
// the CA's certificate, the certificates above it, then its key (PKCS #8).
// A record is written before the first leaf the CA signs is returned, so
// no leaf exists whose CA cannot sign its CRL; records are only ever
// replaced by one for the same key with a later notAfter (a CA renewed
// without a new key). They are scoped by profile so that a profile
// publishes the CRLs of the CAs it issued from and no others.
type issuerBook struct {
	storage Storage

	mu    sync.Mutex
	scope string
	known map[string]keptIssuer // by key id
}

const issuersDir = "acme_proxy/issuers"

// keyIDPattern is what CAKeyID returns: hex, or "name:" and hex.
var keyIDPattern = regexp.MustCompile(`^(name:)?[0-9a-f]{2,128}$`)

func (b *issuerBook) dir() string {
	b.mu.Lock()
	scope := b.scope
	b.mu.Unlock()
	if scope = certmagic.StorageKeys.Safe(scope); scope == "" {
		scope = "_unbound"
	}
	return path.Join(issuersDir, scope)
}

func (b *issuerBook) file(keyID string) string {
	return path.Join(b.dir(), strings.Replace(keyID, ":", "-", 1)+".pem")
}

// bind scopes the book to a profile, once.
func (b *issuerBook) bind(profile string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.scope != "" && b.scope != profile {
		return fmt.Errorf("localca: the signer serves profile %q already and cannot serve %q too", b.scope, profile)
	}
	b.scope = profile
	return nil
}

// remember records iss unless a record of its key with at least its
// validity is known already.
func (b *issuerBook) remember(ctx context.Context, iss Issuer) (keptIssuer, error) {
	// Every issuance asks; all but a CA's first find it known, so the
	// check needs only the key id, not a whole record's worth of names.
	b.mu.Lock()
	old, ok := b.known[signer.CAKeyID(iss.Chain[0])]
	b.mu.Unlock()
	if ok && !iss.Chain[0].NotAfter.After(old.info.NotAfter) {
		return old, nil
	}
	k := keep(iss)
	rec, err := encodeRecord(iss)
	if err != nil {
		return keptIssuer{}, fmt.Errorf("localca: recording issuing CA %q: %w", k.info.Subject, err)
	}
	if err := b.storage.Store(ctx, b.file(k.info.KeyID), rec); err != nil {
		return keptIssuer{}, fmt.Errorf("localca: recording issuing CA %q in storage: %w", k.info.Subject, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.known[k.info.KeyID]; ok && old.info.NotAfter.After(k.info.NotAfter) {
		return old, nil
	}
	b.known[k.info.KeyID] = k
	return k, nil
}

// lookup finds the CA whose key id is keyID: in memory, else in storage.
// A remembered CA past its notAfter is read again, in case it was renewed
// with the same key.
func (b *issuerBook) lookup(ctx context.Context, keyID string, now time.Time) (keptIssuer, error) {
	if !keyIDPattern.MatchString(keyID) {
		return keptIssuer{}, fmt.Errorf("%w: %q is not a CA key id", signer.ErrIssuerUnknown, keyID)
	}
	b.mu.Lock()
	k, ok := b.known[keyID]
	b.mu.Unlock()
	if ok && now.Before(k.info.NotAfter) {
		return k, nil
	}
	file := b.file(keyID)
	raw, err := b.storage.Load(ctx, file)
	switch {
	case errors.Is(err, fs.ErrNotExist) && ok:
		return k, nil
	case errors.Is(err, fs.ErrNotExist):
		return keptIssuer{}, fmt.Errorf("%w: no CA with key id %s has signed for this profile", signer.ErrIssuerUnknown, keyID)
	case err != nil:
		if ok {
			return k, nil
		}
		return keptIssuer{}, fmt.Errorf("%w: reading CA %s from storage: %w", signer.ErrIssuerUnavailable, keyID, err)
	}
	iss, err := decodeRecord(raw)
	if err == nil && signer.CAKeyID(iss.Chain[0]) != keyID {
		err = fmt.Errorf("it holds the CA with key id %s", signer.CAKeyID(iss.Chain[0]))
	}
	if err != nil {
		// Never the record's bytes: they hold the key.
		return keptIssuer{}, fmt.Errorf("%w: the record of CA %s at %s: %w", signer.ErrIssuerUnavailable, keyID, file, err)
	}
	k = keep(iss)
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.known[keyID]; ok && old.info.NotAfter.After(k.info.NotAfter) {
		return old, nil
	}
	b.known[keyID] = k
	return k, nil
}

// list returns every CA recorded for this profile. Records that cannot be
// read are left out and named in the error.
func (b *issuerBook) list(ctx context.Context, now time.Time) ([]keptIssuer, error) {
	keys, err := b.storage.List(ctx, b.dir(), false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("localca: listing the issuing CAs in storage: %w", err)
	}
	slices.Sort(keys)
	var (
		out  []keptIssuer
		errs []error
	)
	for _, key := range keys {
		name, ok := strings.CutSuffix(path.Base(key), ".pem")
		if !ok {
			continue
		}
		keyID := name
		if rest, ok := strings.CutPrefix(name, "name-"); ok {
			keyID = "name:" + rest
		}
		k, err := b.lookup(ctx, keyID, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, k)
	}
	return out, errors.Join(errs...)
}

// encodeRecord writes iss as PEM: its chain, then its key as PKCS #8.
func encodeRecord(iss Issuer) ([]byte, error) {
	key, err := x509.MarshalPKCS8PrivateKey(iss.Key)
	if err != nil {
		// An HSM's key cannot be exported: its CRLs could not be signed
		// once it stops being the current issuer.
		return nil, fmt.Errorf("its key cannot be kept: %w", err)
	}
	var out bytes.Buffer
	for _, c := range iss.Chain {
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	_ = pem.Encode(&out, &pem.Block{Type: "PRIVATE KEY", Bytes: key})
	return out.Bytes(), nil
}

// decodeRecord reads what encodeRecord wrote and checks it as a Source's
// issuer is checked. Its errors never quote the record.
func decodeRecord(raw []byte) (Issuer, error) {
	var iss Issuer
	for block, rest := pem.Decode(raw); block != nil; block, rest = pem.Decode(rest) {
		switch block.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return Issuer{}, fmt.Errorf("certificate %d: %w", len(iss.Chain)+1, err)
			}
			iss.Chain = append(iss.Chain, c)
		case "PRIVATE KEY":
			key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return Issuer{}, fmt.Errorf("the key: %w", err)
			}
			var ok bool
			if iss.Key, ok = key.(crypto.Signer); !ok {
				return Issuer{}, fmt.Errorf("a %T key cannot sign", key)
			}
		}
	}
	if err := iss.check(); err != nil {
		return Issuer{}, err
	}
	return iss, nil
}

// memStorage is the Storage of a Signer built without one: issuers are
// remembered for the life of the process only.
type memStorage struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStorage) Store(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[key] = slices.Clone(value)
	return nil
}

func (s *memStorage) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return slices.Clone(v), nil
}

func (s *memStorage) List(_ context.Context, dir string, _ bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.m {
		if path.Dir(k) == dir {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fs.ErrNotExist
	}
	return out, nil
}
