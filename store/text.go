package store

import "strings"

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
