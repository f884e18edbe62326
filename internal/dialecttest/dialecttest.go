// Package dialecttest finds which database dialect a test runs under, for
// the store, jobs and protocol suites that run their tests once per
// dialect as subtests named after it.
package dialecttest

import "strings"

// Of is the index in names of the dialect the test named testName runs
// under: the innermost part of the name that is one of names, wherever the
// per-dialect subtests were made — at the top of a test, or inside a
// table's case, whose name may have parts of its own. A name with none is
// under the first dialect.
func Of(testName string, names []string) int {
	parts := strings.Split(testName, "/")
	for i := len(parts) - 1; i > 0; i-- {
		for j, n := range names {
			if parts[i] == n {
				return j
			}
		}
	}
	return 0
}
