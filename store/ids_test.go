package store

import (
	"strings"
	"testing"
)

func TestIdsAreTwentySixLowerCaseBase32CharactersAndNeverRepeat(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := NewID()
		if len(id) != 26 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz234567") != "" {
			t.Fatalf("id %q: want 26 characters of a-z and 2-7", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
	}
}

// Ids made close together must sort next to each other (in the order
// they were made), so that an issuance's rows land on the index pages the
// issuances before it wrote; ids made at the same moment differ in their
// random part, which is long enough to be unguessable.
func TestIdsMadeOneAfterAnotherSortInTheirOrderAndShareTheirLeadingCharacters(t *testing.T) {
	const start = 0x0123_4567_89ab // a clock reading, offset included
	cases := []struct {
		name   string
		clocks []uint64
		shared int // leading characters every id shares
	}{
		{"ok/a millisecond apart", []uint64{start, start + 1, start + 2, start + 3}, 8},
		{"ok/a second apart", []uint64{start, start + 1000, start + 2000}, 7},
		{"ok/across a carry of the clock's bits", []uint64{0x0123_4567_ffff, 0x0123_4568_0000, 0x0123_4568_0001}, 5},
		{"ok/within one millisecond", []uint64{start, start, start}, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ids []string
			for _, clk := range c.clocks {
				ids = append(ids, newID(clk))
			}
			for i := 1; i < len(ids); i++ {
				if c.clocks[i] > c.clocks[i-1] && ids[i] <= ids[i-1] {
					t.Errorf("id %q made after %q sorts before it", ids[i], ids[i-1])
				}
				if ids[i] == ids[i-1] {
					t.Errorf("two ids %q", ids[i])
				}
				if ids[i][:c.shared] != ids[0][:c.shared] {
					t.Errorf("ids %q and %q do not share their first %d characters", ids[0], ids[i], c.shared)
				}
			}
			// 80 random bits: 16 characters after the clock's 48 bits
			// (9.6 characters) differ between ids made at once.
			if a, b := ids[0][10:], newID(c.clocks[0])[10:]; a == b {
				t.Errorf("two ids made at once share their random part %q", a)
			}
		})
	}
}
