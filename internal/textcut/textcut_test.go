package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

const mark = "…[cut]"

func TestClipCutsAtACharacterBoundaryAndMarksTheCut(t *testing.T) {
	tests := []struct {
		name, s string
		max     int
		want    string
	}{
		{"short strings are kept", "lego/5", 256, "lego/5"},
		{"a string of exactly the bound is kept", strings.Repeat("a", 16), 16, strings.Repeat("a", 16)},
		{"one byte over is cut and marked", strings.Repeat("a", 17), 16, strings.Repeat("a", 16-len(mark)) + mark},
		{"a cut inside a two-byte character backs up to its start", "a" + strings.Repeat("é", 10), 16, "a" + strings.Repeat("é", 3) + mark},
		{"a cut inside a four-byte character backs up to its start", "ab" + strings.Repeat("😀", 5), 16, "ab" + "😀" + mark},
		{"a bound shorter than the mark keeps the head unmarked", "abcdef", 4, "abcd"},
		{"bytes that are not UTF-8 are cut near the bound", strings.Repeat("\x80", 40), 16, strings.Repeat("\x80", 16-len(mark)-3) + mark},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Clip(tc.s, tc.max, mark); got != tc.want {
				t.Errorf("Clip(%q, %d) = %q; want %q", tc.s, tc.max, got, tc.want)
			}
		})
	}
}

func TestHeadLeavesRoomForTheMarkItsCallerWrites(t *testing.T) {
	head, cut := Head(strings.Repeat("é", 200), 256, len("…"))
	if !cut {
		t.Fatal("a 400-byte string under a 256-byte bound was not cut")
	}
	if len(head)+len("…") > 256 || !utf8.ValidString(head) {
		t.Errorf("head is %d bytes (valid UTF-8: %t); want at most %d and valid", len(head), utf8.ValidString(head), 256-len("…"))
	}
	if len(head) < 256-len("…")-(utf8.UTFMax-1) {
		t.Errorf("head is %d bytes; it backed up further than one character", len(head))
	}
}

func FuzzClip(f *testing.F) {
	f.Add("Mozilla/5.0 (X11; Linux x86_64)", 256)
	f.Add("a"+strings.Repeat("é", 200), 256)
	f.Add(strings.Repeat("\x80", 300), 256)
	f.Add("abc", 0)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 4096 {
			return
		}
		got := Clip(s, max, mark)
		if len(got) > max {
			t.Fatalf("Clip(%q, %d) is %d bytes", s, max, len(got))
		}
		if len(s) <= max {
			if got != s {
				t.Fatalf("Clip(%q, %d) = %q; a string that fits must be kept", s, max, got)
			}
			return
		}
		kept := strings.TrimSuffix(got, mark)
		if max >= len(mark) && kept == got {
			t.Fatalf("Clip(%q, %d) = %q lacks the cut mark", s, max, got)
		}
		if !strings.HasPrefix(s, kept) {
			t.Fatalf("Clip(%q, %d) = %q is not a prefix of s", s, max, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Clip(%q, %d) = %q cut inside a character", s, max, got)
		}
	})
}
