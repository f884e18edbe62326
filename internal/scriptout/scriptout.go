// Package scriptout bounds and redacts what an operator's program (the
// script signer's, a notify script) writes on stderr, before any of it is
// stored or logged: one way for both, so that an operator reads a
// failing program's diagnostics alike wherever it runs, and a secret its
// configuration gives it stays out of both alike.
package scriptout

import (
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// maxLine bounds the stderr line an operator is shown.
const maxLine = 200

// Capped keeps the first Max bytes written to it and notes the rest
// (Over), so that a runaway program cannot fill the memory.
type Capped struct {
	Max  int
	Buf  []byte
	Over bool
}

func (c *Capped) Write(p []byte) (int, error) {
	if room := c.Max - len(c.Buf); room < len(p) {
		c.Buf = append(c.Buf, p[:max(room, 0)]...)
		c.Over = true
		return len(p), nil
	}
	c.Buf = append(c.Buf, p...)
	return len(p), nil
}

// FirstLine is the first non-empty line of stderr, trimmed, at most 200
// bytes: what the operator is shown of a program's failure.
func FirstLine(stderr []byte) string {
	for _, l := range strings.Split(string(stderr), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			l, _ = textcut.Head(l, maxLine, 0)
			return l
		}
	}
	return ""
}
