package signer

import "encoding/pem"

// ChainDERs are the certificates of a PEM chain, in its order (DER, leaf
// first as chains are kept); blocks of other types are skipped. Stored
// chains, a CA chain published by a worker and an upstream's download
// are all read back this way.
func ChainDERs(chainPEM []byte) [][]byte {
	var ders [][]byte
	for b, rest := pem.Decode(chainPEM); b != nil; b, rest = pem.Decode(rest) {
		if b.Type == "CERTIFICATE" {
			ders = append(ders, b.Bytes)
		}
	}
	return ders
}
