package dialecttest

import "testing"

func TestTheDialectIsTheInnermostPartOfATestsNameThatNamesOne(t *testing.T) {
	names := []string{"sqlite", "postgres"}
	for _, c := range []struct {
		name, test string
		want       int
	}{
		{"per-dialect subtests at the top", "TestX/postgres", 1},
		{"below them", "TestX/postgres/a_case", 1},
		{"inside a table's case", "TestX/a_case/postgres", 1},
		{"inside a case whose name has parts", "TestX/full/a_row_committed_late/postgres", 1},
		{"a case named like a dialect, then the dialect", "TestX/postgres/sqlite", 0},
		{"the test's own name is not a part", "postgres", 0},
		{"outside any", "TestX/a_case", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Of(c.test, names); got != c.want {
				t.Errorf("Of(%q) = %d (%s), want %d (%s)", c.test, got, names[got], c.want, names[c.want])
			}
		})
	}
}
