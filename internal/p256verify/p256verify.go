// Package p256verify verifies ECDSA P-256 signatures by one key faster
// than crypto/ecdsa once that key has signed twice, by keeping a table of
// multiples of the key.
//
// Why: every signed ACME request after new-account is signed by an
// account key the server has seen before — seven of them a certificate —
// and verifying them was the largest single share of the server's CPU
// (about a fifth, under the issuance benchmark). Most of a verification
// is [u₂]Q, the scalar multiplication of the public key Q, which
// crypto/ecdsa does in constant time from scratch: 256 doublings. With a
// comb table of Q's multiples (255 points, 24 KiB) it is 32 doublings and
// at most 32 additions. Verification handles only public values (the key,
// the signature, the hash), so the table's lookups need not be constant
// time.
//
// A Key verifies with crypto/ecdsa until its second verification, builds
// its table then (about two ordinary verifications' work), and uses it
// from then on; a key seen once never pays for a table. At most MaxTables
// tables are alive at once across the process, so a server with many
// accounts holds at most MaxTables × 24 KiB; past it, keys verify the
// ordinary way.
package p256verify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"errors"
	"math/big"
	"runtime"
	"sync/atomic"

	"filippo.io/nistec"
)

// MaxTables bounds the comb tables alive at once (24 KiB each).
const MaxTables = 512

// teeth is the comb's width: the scalar's 256 bits are read as 8 rows of
// 32, so a multiplication walks 32 columns, each one doubling and one
// table addition.
const (
	teeth   = 8
	columns = 256 / teeth
)

// liveTables counts the tables not yet collected; maxTables is their
// bound (MaxTables; a variable for the tests).
var (
	liveTables atomic.Int64
	maxTables  int64 = MaxTables
)

// n is P-256's group order.
var n = elliptic.P256().Params().N

// Key is a P-256 public key that verifies signatures, with a comb table
// once it has been used twice. It is safe for concurrent use.
type Key struct {
	pub   *ecdsa.PublicKey
	q     *nistec.P256Point
	uses  atomic.Int32
	table atomic.Pointer[comb]
}

// comb holds t[i] = Σ 2^(32j)·Q over the bits j of i, for i in 1..255.
type comb [1 << teeth]nistec.P256Point

// NewKey returns pub as a Key. pub must be on P-256.
func NewKey(pub *ecdsa.PublicKey) (*Key, error) {
	if pub.Curve != elliptic.P256() {
		return nil, errors.New("p256verify: not a P-256 key")
	}
	b, err := pub.Bytes()
	if err != nil {
		return nil, err
	}
	q, err := nistec.NewP256Point().SetBytes(b)
	if err != nil {
		return nil, err
	}
	return &Key{pub: pub, q: q}, nil
}

// Verify reports whether (r, s), two big-endian integers, is a valid
// ECDSA signature of hash by the key: the same answer as
// crypto/ecdsa.Verify.
func (k *Key) Verify(hash, r, s []byte) bool {
	t := k.table.Load()
	if t == nil {
		if k.uses.Add(1) < 2 || !reserveTable() {
			return ecdsa.Verify(k.pub, hash, new(big.Int).SetBytes(r), new(big.Int).SetBytes(s))
		}
		t = newComb(k.q)
		if !k.table.CompareAndSwap(nil, t) {
			liveTables.Add(-1) // another verification built it first
			t = k.table.Load()
		} else {
			runtime.AddCleanup(t, func(struct{}) { liveTables.Add(-1) }, struct{}{})
		}
	}
	return t.verify(hash, r, s)
}

// HasTable reports whether the key verifies with its table.
func (k *Key) HasTable() bool { return k.table.Load() != nil }

// reserveTable counts a table about to be built, unless MaxTables are
// alive.
func reserveTable() bool {
	for {
		live := liveTables.Load()
		if live >= maxTables {
			return false
		}
		if liveTables.CompareAndSwap(live, live+1) {
			return true
		}
	}
}

func newComb(q *nistec.P256Point) *comb {
	var rows [teeth]nistec.P256Point // rows[j] = 2^(32j)·Q
	rows[0].Set(q)
	for j := 1; j < teeth; j++ {
		rows[j].Set(&rows[j-1])
		for range columns {
			rows[j].Double(&rows[j])
		}
	}
	t := new(comb)
	for i := 1; i < len(t); i++ {
		low := i & -i
		j := 0
		for 1<<j != low {
			j++
		}
		if rest := i &^ low; rest == 0 {
			t[i].Set(&rows[j])
		} else {
			t[i].Add(&t[rest], &rows[j])
		}
	}
	return t
}

// mult returns k·Q for the 32-byte big-endian scalar k.
func (t *comb) mult(k *[32]byte) *nistec.P256Point {
	acc := nistec.NewP256Point() // the point at infinity
	for c := columns - 1; c >= 0; c-- {
		acc.Double(acc)
		i := 0
		for j := range teeth {
			bit := j*columns + c // bit index from the least significant
			i |= int(k[31-bit/8]>>(bit%8)&1) << j
		}
		if i != 0 {
			acc.Add(acc, &t[i])
		}
	}
	return acc
}

// verify is FIPS 186-5 §6.4.2 with [u₂]Q from the table; the scalar
// arithmetic modulo n is math/big's (variable time: every input is
// public).
func (t *comb) verify(hash, rb, sb []byte) bool {
	r, s := new(big.Int).SetBytes(rb), new(big.Int).SetBytes(sb)
	if r.Sign() <= 0 || s.Sign() <= 0 || r.Cmp(n) >= 0 || s.Cmp(n) >= 0 {
		return false
	}
	if len(hash) > 32 { // the leftmost bits, as many as n has (256)
		hash = hash[:32]
	}
	e := new(big.Int).SetBytes(hash)
	w := new(big.Int).ModInverse(s, n)
	u1 := e.Mul(e, w)
	u1.Mod(u1, n)
	u2 := new(big.Int).Mul(r, w)
	u2.Mod(u2, n)
	var b1, b2 [32]byte
	u1.FillBytes(b1[:])
	u2.FillBytes(b2[:])
	p, err := nistec.NewP256Point().ScalarBaseMult(b1[:])
	if err != nil {
		return false
	}
	x, err := p.Add(p, t.mult(&b2)).BytesX() // an error for the point at infinity
	if err != nil {
		return false
	}
	v := new(big.Int).SetBytes(x)
	v.Mod(v, n)
	return v.Cmp(r) == 0
}
