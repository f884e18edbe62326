//go:build unix

package proccpu

import (
	"crypto/sha256"
	"testing"
	"time"
)

func TestUsedGrowsWithTheWorkThisProcessDoes(t *testing.T) {
	before := Used()
	sum := sha256.Sum256(nil)
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		sum = sha256.Sum256(sum[:])
	}
	if got := Used() - before; got < 10*time.Millisecond {
		t.Fatalf("50 ms of hashing added %v of CPU time; want at least 10 ms", got)
	}
}
