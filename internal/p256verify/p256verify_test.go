package p256verify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"math/big"
	"testing"

	"filippo.io/nistec"
)

// signed is a key, a hash and a valid signature of it, as two 32-byte
// big-endian halves (a JWS's ES256 signature).
type signed struct {
	key  *ecdsa.PrivateKey
	hash []byte
	r, s []byte
}

func newSigned(t testing.TB, msg string) signed {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signedBy(t, key, msg)
}

func signedBy(t testing.TB, key *ecdsa.PrivateKey, msg string) signed {
	t.Helper()
	h := sha256.Sum256([]byte(msg))
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed{key: key, hash: h[:], r: r.FillBytes(make([]byte, 32)), s: s.FillBytes(make([]byte, 32))}
}

// tabled returns the key with its table built (a Key builds it at its
// second verification).
func tabled(t testing.TB, pub *ecdsa.PublicKey) *Key {
	t.Helper()
	k, err := NewKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	k.uses.Store(1)
	k.table.Store(newComb(k.q))
	return k
}

func stdVerify(pub *ecdsa.PublicKey, hash, r, s []byte) bool {
	return ecdsa.Verify(pub, hash, new(big.Int).SetBytes(r), new(big.Int).SetBytes(s))
}

func bytes32(x *big.Int) []byte { return x.FillBytes(make([]byte, 32)) }

func TestTheTableMultipliesAsTheCurveDoes(t *testing.T) {
	sg := newSigned(t, "m")
	k := tabled(t, &sg.key.PublicKey)
	for _, scalar := range []*big.Int{big.NewInt(0), big.NewInt(1), big.NewInt(2), big.NewInt(255), new(big.Int).Lsh(big.NewInt(1), 255), new(big.Int).Sub(n, big.NewInt(1)), new(big.Int).Rsh(n, 1)} {
		var b [32]byte
		scalar.FillBytes(b[:])
		want, err := nistec.NewP256Point().ScalarMult(k.q, b[:])
		if err != nil {
			t.Fatal(err)
		}
		if k.table.Load().mult(&b).Equal(want) != 1 {
			t.Errorf("the table's multiple by %x differs from ScalarMult's", b)
		}
	}
}

// Every case is checked against crypto/ecdsa, with and without the table.
func TestVerifyAnswersAsCryptoECDSADoes(t *testing.T) {
	sg := newSigned(t, "a request")
	other := newSigned(t, "another")
	nMinus := func(v []byte) []byte { return bytes32(new(big.Int).Sub(n, new(big.Int).SetBytes(v))) }
	flip := func(v []byte, i int) []byte { c := append([]byte(nil), v...); c[i] ^= 1; return c }
	long := sha256.Sum256([]byte("x"))
	cases := []struct {
		name    string
		hash    []byte
		r, s    []byte
		wantStd bool // what crypto/ecdsa answers, stated so that a case that tests nothing shows
	}{
		{"a valid signature", sg.hash, sg.r, sg.s, true},
		{"the same signature with s negated (ECDSA's malleability, which crypto/ecdsa accepts)", sg.hash, sg.r, nMinus(sg.s), true},
		{"another message's hash", other.hash, sg.r, sg.s, false},
		{"another key's signature", other.hash, other.r, other.s, false},
		{"a bit of r flipped", sg.hash, flip(sg.r, 31), sg.s, false},
		{"a bit of s flipped", sg.hash, sg.r, flip(sg.s, 0), false},
		{"r zero", sg.hash, make([]byte, 32), sg.s, false},
		{"s zero", sg.hash, sg.r, make([]byte, 32), false},
		{"r equal to n", sg.hash, bytes32(n), sg.s, false},
		{"s equal to n", sg.hash, sg.r, bytes32(n), false},
		{"r plus n (the same value modulo n)", sg.hash, new(big.Int).Add(new(big.Int).SetBytes(sg.r), n).Bytes(), sg.s, false},
		{"a hash longer than 32 bytes, of which the leftmost 32 were signed", append(append([]byte(nil), sg.hash...), long[:]...), sg.r, sg.s, true},
		{"an empty hash", nil, sg.r, sg.s, false},
	}
	k := tabled(t, &sg.key.PublicKey)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			std := stdVerify(&sg.key.PublicKey, c.hash, c.r, c.s)
			if std != c.wantStd {
				t.Fatalf("crypto/ecdsa says %v; the case expects %v", std, c.wantStd)
			}
			if got := k.Verify(c.hash, c.r, c.s); got != std {
				t.Errorf("with the table: %v; crypto/ecdsa: %v", got, std)
			}
			fresh, err := NewKey(&sg.key.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			if got := fresh.Verify(c.hash, c.r, c.s); got != std {
				t.Errorf("without a table: %v; crypto/ecdsa: %v", got, std)
			}
		})
	}
}

// Two cases no random signature reaches: a sum u₁G + u₂Q at infinity,
// and one whose x lies in [n, p), so that only x mod n equals r.
func TestTheRareCasesOfTheSumAnswerAsCryptoECDSADoes(t *testing.T) {
	t.Run("the sum is the point at infinity", func(t *testing.T) {
		sg := newSigned(t, "m")
		// e = −r·d makes u₁G + u₂Q = (e + r·d)·s⁻¹·G = 0.
		e := new(big.Int).Mul(new(big.Int).SetBytes(sg.r), sg.key.D)
		e.Neg(e).Mod(e, n)
		hash := bytes32(e)
		if stdVerify(&sg.key.PublicKey, hash, sg.r, sg.s) {
			t.Fatal("crypto/ecdsa accepts the case; it should not")
		}
		if tabled(t, &sg.key.PublicKey).Verify(hash, sg.r, sg.s) {
			t.Error("with the table: accepted a sum at infinity")
		}
	})
	t.Run("the sum's x is n or more", func(t *testing.T) {
		pub, hash, r, s := signatureWithXAboveN(t)
		if !stdVerify(pub, hash, r, s) {
			t.Fatal("crypto/ecdsa refuses the constructed signature; the construction is wrong")
		}
		if !tabled(t, pub).Verify(hash, r, s) {
			t.Error("with the table: refused a signature whose x is above n")
		}
	})
}

// signatureWithXAboveN builds a key and a valid signature whose
// u₁G + u₂Q has an x in [n, p): R is such a point, a and b random, and
// Q = b⁻¹(R − aG), r = x mod n, s = r·b⁻¹, e = a·s — so that u₁ = a and
// u₂ = b.
func signatureWithXAboveN(t *testing.T) (pub *ecdsa.PublicKey, hash, r, s []byte) {
	t.Helper()
	params := elliptic.P256().Params()
	p := params.P
	var R *nistec.P256Point
	for x := new(big.Int).Set(n); x.Cmp(p) < 0; x.Add(x, big.NewInt(1)) {
		// y² = x³ − 3x + b
		y2 := new(big.Int).Exp(x, big.NewInt(3), p)
		y2.Sub(y2, new(big.Int).Mul(big.NewInt(3), x))
		y2.Add(y2, params.B).Mod(y2, p)
		y := new(big.Int).ModSqrt(y2, p)
		if y == nil {
			continue
		}
		enc := append([]byte{4}, append(bytes32(x), bytes32(y)...)...)
		pt, err := nistec.NewP256Point().SetBytes(enc)
		if err != nil {
			t.Fatalf("(%x, %x) is not on the curve: %v", x, y, err)
		}
		R = pt
		break
	}
	if R == nil {
		t.Fatal("no point with x in [n, p) found")
	}
	xr, err := R.BytesX()
	if err != nil {
		t.Fatal(err)
	}
	rInt := new(big.Int).Mod(new(big.Int).SetBytes(xr), n)
	a, b := big.NewInt(12345), big.NewInt(67891)
	bInv := new(big.Int).ModInverse(b, n)
	aG, err := nistec.NewP256Point().ScalarBaseMult(bytes32(a))
	if err != nil {
		t.Fatal(err)
	}
	diff := nistec.NewP256Point().Add(R, nistec.NewP256Point().Negate(aG))
	Q, err := nistec.NewP256Point().ScalarMult(diff, bytes32(bInv))
	if err != nil {
		t.Fatal(err)
	}
	enc := Q.Bytes()
	pub = &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(enc[1:33]), Y: new(big.Int).SetBytes(enc[33:])}
	sInt := new(big.Int).Mul(rInt, bInv)
	sInt.Mod(sInt, n)
	e := new(big.Int).Mul(a, sInt)
	e.Mod(e, n)
	return pub, bytes32(e), bytes32(rInt), bytes32(sInt)
}

func TestManySignaturesOfManyKeysVerifyAsWithCryptoECDSA(t *testing.T) {
	for i := range 50 {
		sg := newSigned(t, "msg")
		k := tabled(t, &sg.key.PublicKey)
		for j := range 4 {
			s := signedBy(t, sg.key, string(rune('a'+i+j)))
			if !k.Verify(s.hash, s.r, s.s) {
				t.Fatalf("key %d: a valid signature was refused", i)
			}
			bad := append([]byte(nil), s.s...)
			bad[j] ^= 0x80
			if k.Verify(s.hash, s.r, bad) != stdVerify(&sg.key.PublicKey, s.hash, s.r, bad) {
				t.Fatalf("key %d: a changed signature was answered differently from crypto/ecdsa", i)
			}
		}
	}
}

func TestAKeyBuildsItsTableAtItsSecondVerificationNotItsFirst(t *testing.T) {
	sg := newSigned(t, "m")
	k, err := NewKey(&sg.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Verify(sg.hash, sg.r, sg.s) || k.HasTable() {
		t.Fatalf("after one verification: table %v; want a valid signature verified without one", k.HasTable())
	}
	if !k.Verify(sg.hash, sg.r, sg.s) || !k.HasTable() {
		t.Fatalf("after two verifications: table %v; want a valid signature verified with one", k.HasTable())
	}
}

func TestNoMoreThanMaxTablesAreBuilt(t *testing.T) {
	// A bound of none stands for MaxTables alive, whatever the collector
	// frees of other tests' tables meanwhile.
	maxTables = 0
	defer func() { maxTables = MaxTables }()
	sg := newSigned(t, "m")
	k, err := NewKey(&sg.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if !k.Verify(sg.hash, sg.r, sg.s) {
			t.Fatal("a valid signature was refused at the table limit")
		}
	}
	if k.HasTable() {
		t.Error("a table was built with MaxTables alive")
	}
}

func TestAKeyOnAnotherCurveIsRefused(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKey(&key.PublicKey); err == nil {
		t.Error("a P-384 key was taken")
	}
}

// FuzzVerifyAgreesWithCryptoECDSA: the table verifier gives crypto/ecdsa's
// answer for any hash and signature halves, and for a signature the key
// made over the hash (which both must accept) and its variants: (r, n−s),
// which ECDSA accepts too, and r or s plus n, which it does not. Random
// halves are almost never a signature; these are, or nearly.
func FuzzVerifyAgreesWithCryptoECDSA(f *testing.F) {
	sg := newSigned(f, "seed")
	f.Add(sg.hash, sg.r, sg.s)
	f.Add(sg.hash, sg.s, sg.r)
	f.Add([]byte{}, []byte{1}, []byte{1})
	f.Add(append(sg.hash, 0xff), sg.r, sg.s)
	f.Add(sg.hash[:31], sg.r, sg.s)
	k := tabled(f, &sg.key.PublicKey)
	agree := func(t *testing.T, hash, r, s []byte) bool {
		t.Helper()
		got, want := k.Verify(hash, r, s), stdVerify(&sg.key.PublicKey, hash, r, s)
		if got != want {
			t.Errorf("Verify(%x, %x, %x) = %v; crypto/ecdsa says %v", hash, r, s, got, want)
		}
		return got
	}
	f.Fuzz(func(t *testing.T, hash, r, s []byte) {
		if len(r) > 40 || len(s) > 40 {
			return
		}
		agree(t, hash, r, s)

		r0, s0, err := ecdsa.Sign(rand.Reader, sg.key, hash)
		if err != nil {
			t.Fatal(err)
		}
		if !agree(t, hash, r0.Bytes(), s0.Bytes()) {
			t.Errorf("the key's own signature of %x does not verify", hash)
		}
		agree(t, hash, r0.Bytes(), new(big.Int).Sub(n, s0).Bytes())
		agree(t, hash, new(big.Int).Add(r0, n).Bytes(), s0.Bytes())
		agree(t, hash, r0.Bytes(), new(big.Int).Add(s0, n).Bytes())
	})
}

func BenchmarkVerify(b *testing.B) {
	sg := newSigned(b, "m")
	b.Run("crypto/ecdsa", func(b *testing.B) {
		for b.Loop() {
			stdVerify(&sg.key.PublicKey, sg.hash, sg.r, sg.s)
		}
	})
	b.Run("table", func(b *testing.B) {
		k := tabled(b, &sg.key.PublicKey)
		for b.Loop() {
			k.Verify(sg.hash, sg.r, sg.s)
		}
	})
	b.Run("building the table", func(b *testing.B) {
		k, _ := NewKey(&sg.key.PublicKey)
		for b.Loop() {
			newComb(k.q)
		}
	})
}
