package authority

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
)

// ErrKeyType: a key of a type the key policy does not accept at all.
var ErrKeyType = errors.New("the key type is not supported")

// GoodKey is the one key policy, for account keys (the JWS) and
// certificate keys (the CSR) alike: RSA keys of 2048 to 8192 bits, ECDSA
// keys on P-256 or P-384, and Ed25519 keys. It returns nil for a good key,
// else an error saying why the key is refused, wrapping ErrKeyType for a
// type that is not accepted at all.
func GoodKey(key crypto.PublicKey) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < 2048 || bits > 8192 {
			return fmt.Errorf("RSA keys must have 2048 to 8192 bits, not %d", bits)
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return errors.New("ECDSA keys must be on P-256 or P-384")
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("%w: %T", ErrKeyType, key)
	}
	return nil
}
