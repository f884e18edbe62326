package relay

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mholt/acmez/v3/acme"
)

// These tests put the relay in front of an upstream that misbehaves the
// way real ACME CAs do: Pebble's own fault knobs where it has one, a
// small front of the test's where it has none.

func TestEveryRelayedOrderIsIssuedWhenTheUpstreamRejectsHalfTheNoncesItIsSent(t *testing.T) {
	ctx := context.Background()
	b := pebbleBenchOn(t, newPebbleUpstreamOf(t, 0, 50))
	for _, name := range []string{"n1.example.com", "n2.example.com", "n3.example.com", "n4.example.com"} {
		req := b.finalized(t, name)
		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
		// Every request is sent again with the nonce of its badNonce
		// answer (RFC 8555 §6.5), ten times at most (as acmez does): an
		// attempt fails for it about once in a hundred, and the next
		// attempt carries on.
		var outcomes []string
		for len(outcomes) < 3 {
			out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
			if outcomes = append(outcomes, out); out == "done" {
				break
			}
		}
		if outcomes[len(outcomes)-1] != "done" {
			t.Fatalf("relay of %s: %q; want done", name, outcomes)
		}
		chain := b.settler.issued[req.OrderID]
		leaf, err := x509.ParseCertificate(chain[0])
		if err != nil || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != name {
			t.Fatalf("relay of %s: leaf %v (%v)", name, leaf, err)
		}
	}
}

func TestADownloadIsSentAgainForAsLongABadNonceStreakAsTheRelaysOtherRequests(t *testing.T) {
	// acmez sends every other upstream request up to ten times while
	// the upstream answers badNonce; a download gets as many.
	const streak = 9
	var downloads atomic.Int32
	bad := problemAnswer(http.StatusBadRequest, acme.ProblemTypeBadNonce, "stale nonce", "Replay-Nonce", "fresh-nonce")
	up := validOrderUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if downloads.Add(1) <= streak {
			bad(w, r)
			return
		}
		refuse(w, r) // the test has seen the download through the streak
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "dl.example.com")
	if _, err := b.s.Issue(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(context.Background(), b.job(t, req.OrderID)).String()
	if !strings.Contains(out, "refused by the test") {
		t.Errorf("outcome %q after %d downloads; want the answer to the download after %d badNonce answers", out, downloads.Load(), streak)
	}
}
