package authority

import (
	"context"
	"crypto/x509"
	"math/big"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// crlFullEvery is how long the entries kept of the CRLs this server built
// (keptCRL) serve the next ones before the ledger is read in full again.
// The store's checks (store.PublishCRLFrom) find a ledger row that
// committed late or was deleted, and a stored CRL that is not this
// server's; this bounds how long anything they could not see lasts.
const crlFullEvery = time.Hour

// keptCRL is what this server's last CRL of one CA listed, each entry
// encoded, so that the next CRL reads and encodes only the revocations
// after it: a CRL of 100,000 entries is 5 MB, and reading and encoding
// its entries again each time is most of a regeneration. It is not
// changed once kept (builds that run at once share it).
type keptCRL struct {
	number int64  // the cRLNumber it was published as
	seq    int64  // the last ledger row it read
	mark   string // its read's store.CRLRead.Mark
	readAt time.Time
	// delta: it was built from the one before and the ledger rows
	// after that one's seq; readAt is when the ledger was last read in
	// full.
	delta   bool
	entries []keptEntry // in ledger order
}

// keptEntry is one entry of a kept CRL.
type keptEntry struct {
	id       int64 // its ledger row
	notAfter int64 // the certificate's, in Unix ms: past it the entry leaves the CRL
	der      []byte
}

// unexpired is the kept entries still on a CRL whose entries of
// certificates expired before dropBefore are left off (as the store
// drops them: not_after before dropBefore).
func (k *keptCRL) unexpired(dropBefore time.Time) []keptEntry {
	at := dropBefore.UnixMilli()
	for i, e := range k.entries {
		if e.notAfter < at {
			kept := make([]keptEntry, i, len(k.entries))
			copy(kept, k.entries[:i])
			for _, e := range k.entries[i:] {
				if e.notAfter >= at {
					kept = append(kept, e)
				}
			}
			return kept
		}
	}
	return k.entries
}

// lastBuilt is the kept CRL of issuer, or nil.
func (c *crlCache) lastBuilt(issuer string) *keptCRL {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.built[issuer]
}

// keepBuilt keeps k as the last CRL built of issuer, unless one with a
// higher number is kept already.
func (c *crlCache) keepBuilt(issuer string, k *keptCRL) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.built == nil {
		c.built = map[string]*keptCRL{}
	}
	if old, ok := c.built[issuer]; ok && old.number > k.number {
		return
	}
	c.built[issuer] = k
}

// publishKeptCRL publishes the CRL of iss from the entries kept of this
// server's last one and the ledger rows after it, or, when the store
// finds the ledger changed below it, when none is kept (a new CA, a
// restart) or when it was last read in full crlFullEvery ago, from every
// entry of the ledger still listed (crlDropBefore). delta says which. An error wrapping
// errors.ErrUnsupported says cs cannot sign the CRL so.
func (au *Authority) publishKeptCRL(ctx context.Context, cs signer.EncodedCRLSigner, iss signer.IssuerInfo, now time.Time, follow bool,
	audit func(store.CRL) store.AuditEvent) (crl store.CRL, delta bool, err error) {
	prev := au.crls.lastBuilt(iss.KeyID)
	var (
		base *store.CRLBase
		kept []keptEntry
	)
	if prev != nil && now.Sub(prev.readAt) < crlFullEvery {
		kept = prev.unexpired(crlDropBefore(now))
		base = &store.CRLBase{Number: prev.number, Seq: prev.seq, Mark: prev.mark, Count: int64(len(kept))}
	}
	var built *keptCRL
	crl, err = au.db.PublishCRLFromAudited(ctx, iss.KeyID, iss.NameID, now, crlDropBefore(now), base, func(r store.CRLRead) ([]byte, time.Time, time.Time, error) {
		this, next := crlTimes(now)
		if err := checkFollows(r, now, follow); err != nil {
			return nil, this, next, err
		}
		added, err := encodeCRLEntries(r.Entries, this)
		if err != nil {
			return nil, this, next, err
		}
		k := &keptCRL{seq: r.Seq, mark: r.Mark, readAt: now, delta: r.Delta, entries: added}
		if r.Delta {
			k.readAt = prev.readAt
			k.entries = append(kept[:len(kept):len(kept)], added...)
		}
		ders := make([][]byte, len(k.entries))
		for i, e := range k.entries {
			ders[i] = e.der
		}
		der, err := cs.SignEncodedCRL(ctx, iss.KeyID, &x509.RevocationList{Number: big.NewInt(r.Number), ThisUpdate: this, NextUpdate: next}, ders)
		built = k
		return der, this, next, err
	}, audit)
	if err != nil {
		return store.CRL{}, false, err
	}
	built.number = crl.Number
	au.crls.keepBuilt(iss.KeyID, built)
	return crl, built.delta, nil
}

// encodeCRLEntries encodes the CRL entries of ledger rows on a CRL whose
// thisUpdate is this (crlEntry), into one buffer. The CRLs after it keep
// them as they are: their thisUpdate is later.
func encodeCRLEntries(rows []store.CRLEntry, this time.Time) ([]keptEntry, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	ders, err := signer.EncodeCRLEntries(len(rows), func(i int) (x509.RevocationListEntry, error) { return crlEntry(rows[i], this) })
	if err != nil {
		return nil, err
	}
	out := make([]keptEntry, len(rows))
	for i, r := range rows {
		out[i] = keptEntry{id: r.ID, notAfter: r.NotAfter.UnixMilli(), der: ders[i]}
	}
	return out, nil
}
