package authority

import (
	"context"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// RetentionSweepKind is the periodic job that applies the order and
// certificate retention.
const RetentionSweepKind = "retention_sweep"

// Retention is how long the retention sweep keeps what it prunes; 0
// keeps it for good.
type Retention struct {
	// Orders: an order that never got a certificate, past its expiry or
	// failure (and its authorizations' expiry); a deactivated account,
	// past its deactivation, once no order of it is left.
	Orders time.Duration
	// Certificates: a certificate past its notAfter, with its revocation
	// row and its order; never one revoked for keyCompromise, which keeps
	// its key from being certified again. Until then a revocation request, ARI and the
	// audit trail's references still find it, and a CRL lists it only
	// until its notAfter anyway.
	Certificates time.Duration
}

// SweepRetention deletes, across every profile (also those no config
// mounts any more), what r no longer keeps at now, in small batches (see
// store.PruneRetention), and records a sweep that deleted anything in an
// audit row of its own (actor system): written in the transaction of its
// last batch, or, when the sweep stops part way, on its own with what it
// had deleted.
func SweepRetention(ctx context.Context, db *store.DB, r Retention, now time.Time) (store.Pruned, error) {
	plan := store.Retention{Now: now}
	if r.Orders > 0 {
		plan.OrdersBefore = now.Add(-r.Orders)
	}
	if r.Certificates > 0 {
		plan.CertificatesBefore = now.Add(-r.Certificates)
	}
	if plan.OrdersBefore.IsZero() && plan.CertificatesBefore.IsZero() {
		return store.Pruned{}, nil
	}
	plan.Record = func(p store.Pruned, stopped error) (store.AuditEvent, bool) {
		outcome, why := PruneOutcome(stopped)
		return store.AuditEvent{At: now, Event: acme.EventRetentionPruned, Outcome: outcome, ActorKind: ActorSystem, Reason: "retention",
			Detail: fmt.Sprintf("the retention sweep deleted %d orders (%d authorizations, %d challenges), %d certificates (%d revocation rows) and %d deactivated accounts (order_retention %s, certificate_retention %s; longest batch %s)%s",
				p.Orders, p.Authorizations, p.Challenges, p.Certificates, p.Revocations, p.Accounts,
				keptFor(r.Orders), keptFor(r.Certificates), p.LongestBatch.Round(100*time.Microsecond), why)}, p.Any()
	}
	return db.PruneRetention(ctx, plan)
}

// keptFor writes a retention as configured: days, or keep.
func keptFor(d time.Duration) string {
	if d <= 0 {
		return "keep"
	}
	return days(d)
}
