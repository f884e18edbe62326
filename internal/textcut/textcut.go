// Package textcut bounds text that is echoed or stored (a problem's
// detail, an audit field, an operator's error) to a number of bytes,
// cutting at a UTF-8 character boundary so that the cut text stays valid
// UTF-8 wherever the original was, and marking the cut so a reader knows
// the value went on. One cut for every package that bounds such text, so
// they all cut the same way.
package textcut

import "unicode/utf8"

// Head is s when it is at most max bytes (cut false). Otherwise it is the
// longest prefix of s of at most max-reserve bytes that does not end
// inside a character (cut true), leaving reserve bytes for the mark the
// caller writes after it. A reserve larger than max reserves nothing, so
// a head is never negative in length.
func Head(s string, max, reserve int) (head string, cut bool) {
	if max < 0 {
		max = 0
	}
	if len(s) <= max {
		return s, false
	}
	k := max - reserve
	if reserve > max {
		k = max
	}
	// Back up over the continuation bytes of a character cut in two: at
	// most UTFMax-1 of them belong to one character, so bytes that are
	// not UTF-8 at all cost no more than that.
	for i := 0; i < utf8.UTFMax-1 && k > 0 && !utf8.RuneStart(s[k]); i++ {
		k--
	}
	return s[:k], true
}

// Clip bounds s to at most max bytes: a longer s is its Head followed by
// mark, so a reader sees that it was cut. When max cannot hold mark the
// head alone is returned. s is returned as is when it fits.
func Clip(s string, max int, mark string) string {
	if len(mark) > max {
		mark = ""
	}
	head, cut := Head(s, max, len(mark))
	if !cut {
		return s
	}
	return head + mark
}
