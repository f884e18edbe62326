//go:build !unix

package execpath

// mayExecute has nothing to check where execute permission is not a
// mode bit (Windows): Check's own test is all there is.
func mayExecute(string) error { return nil }
