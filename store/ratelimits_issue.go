package store

import (
	"fmt"
	"strconv"
	"strings"
)

// The spends of an issuance (IssueOrder): what a limit counts when a
// certificate is issued — duplicate_certificates, as Boulder's
// CertificatesPerFQDNSet — checked at new-order (CheckOnly) and spent by
// the issuance's own write, which costs it no commit of its own.
//
// Such a spend is spend-only, as Boulder's: the certificate is signed
// already, so nothing it finds refuses it. A spend that fits moves its
// bucket as SpendLimits would; one that does not fit is dropped, as
// Boulder drops it and as a denied spend changes nothing in SpendLimits:
// the bucket then holds less than one unit already, so the next check of
// it refuses until a unit refills, as it would have with the unit taken.
// (Saturating it at the period instead would move its TAT by less than
// one emission interval.) A certificate over the limit is one whose order
// passed the check while its bucket still had room, concurrent orders of
// the same set having taken it since.

// issueSpendSet moves a bucket's TAT by a spend's cost: max(TAT, now) +
// cost × emission, the excluded row's TAT being now + cost × emission.
// The spend is dropped (the row left as it is) unless the new TAT stays
// within the period of now, which, for a cost of at most a burst, is
// when the stored TAT is at most now + period − cost × emission.
// Arguments: now, cost × emission, now + period − cost × emission.
const issueSpendSet = `ON CONFLICT (key) DO UPDATE SET tat_ns = CASE WHEN rate_limits.tat_ns > ? THEN rate_limits.tat_ns + ? ELSE excluded.tat_ns END
		WHERE rate_limits.tat_ns <= ?`

// issueSpendSQL is the statement of one spend of an issuance inside its
// transaction. Arguments: issueSpendArgs.
const issueSpendSQL = `INSERT INTO rate_limits (key, tat_ns) VALUES (?, ?) ` + issueSpendSet

// issueSpendArgs are the arguments of one spend of an issuance at now
// (Unix nanoseconds): the key, the TAT of a new bucket, then
// issueSpendSet's.
func issueSpendArgs(s LimitSpend, now int64) []any {
	cost := s.Cost * int64(s.Emission)
	return []any{s.Key, now + cost, now, cost, now + int64(s.Emission)*s.Burst - cost}
}

// checkIssueSpends refuses spends an issuance cannot take: a key twice
// (one statement moves a row once), a check, the pending authorizations
// cap, or a cost over the burst (it never fits: that is a caller's
// mistake, not a limit met).
func checkIssueSpends(spends []LimitSpend) error {
	if err := checkSpends(spends); err != nil {
		return err
	}
	for i, s := range spends {
		switch {
		case s.CheckOnly || s.PendingAuthzs:
			return fmt.Errorf("store: rate limit bucket %q: an issuance only spends", Clip(s.Key, 64))
		case s.Cost > s.Burst:
			return fmt.Errorf("store: rate limit bucket %q: a cost of %d over a burst of %d", Clip(s.Key, 64), s.Cost, s.Burst)
		}
		for _, o := range spends[:i] {
			if o.Key == s.Key {
				return fmt.Errorf("store: rate limit bucket %q spent twice by one issuance", Clip(s.Key, 64))
			}
		}
	}
	return nil
}

// issueSpendCTEs are the data-modifying WITH clauses of n spends in
// PostgreSQL's issueOrder, each inserting from the moved order's row (o),
// so that a spend is taken only when the order moved. Arguments, for
// each: issueSpendArgs.
func issueSpendCTEs(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`,
		l` + strconv.Itoa(i) + ` AS (
			INSERT INTO rate_limits (key, tat_ns) SELECT ?::text, ?::bigint FROM o
			ON CONFLICT (key) DO UPDATE SET tat_ns = CASE WHEN rate_limits.tat_ns > ?::bigint THEN rate_limits.tat_ns + ?::bigint ELSE excluded.tat_ns END
			WHERE rate_limits.tat_ns <= ?::bigint)`)
	}
	return b.String()
}
