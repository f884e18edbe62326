package store

import (
	"strings"
	"unicode/utf8"
)

// text makes s storable as text in both dialects: bytes that are not
// UTF-8 (a program's output cut inside a character, a client's header in
// Latin-1) and NUL, which PostgreSQL refuses in a text column, become
// U+FFFD. Such a string came from outside — a signer's stderr, an
// upstream's answer, a client's User-Agent — and a write refused for it
// would be refused at every retry.
func text(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// holdable reports whether a row can have s as a key: text with no NUL,
// all of it UTF-8 (what text leaves as it is). A lookup by a key that is
// not — an id a client made up, in a path, a kid or a cursor — finds
// nothing in either dialect, and must not be sent: PostgreSQL refuses
// such text in a statement, and a refused statement is a fault, not the
// "not found" the client's request is.
func holdable(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// allHoldable reports whether every one of a search's values is holdable.
// A search by one that is not (an operator's filter, typed or pasted)
// matches no row, and is not sent, for the reason holdable gives.
func allHoldable(ss ...string) bool {
	for _, s := range ss {
		if !holdable(s) {
			return false
		}
	}
	return true
}

// FailureTextMax bounds, in bytes, the text a row keeps for the operator
// about a failure: a job's last error, an order's failure detail, a relay
// order's detail. Such text quotes what an outside party answered (an
// upstream CA's Location or problem, an SMTP server's reply, a program's
// stderr), and is written again at every retry; a longer one is cut by
// Clip, its start kept.
const FailureTextMax = 4 << 10

// failureText is s made storable (see text) and cut to FailureTextMax.
func failureText(s string) string {
	return Clip(text(s), FailureTextMax)
}
