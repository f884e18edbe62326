package authority

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Audit outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
	OutcomeRefused = "refused"
	// OutcomeInterrupted is a prune or sweep that stopped part way (its
	// context ended, a batch failed) after deleting some of what it was
	// to delete: its row says how much.
	OutcomeInterrupted = "interrupted"
)

// PruneOutcome is the outcome of the audit row of a prune or sweep,
// given the error it stopped with part way (nil: it ran to the end), and
// what its detail adds: why it stopped. The cause is named by its kind,
// never by the database's message (the job's log line has that).
func PruneOutcome(stopped error) (outcome, detail string) {
	switch {
	case stopped == nil:
		return OutcomeSuccess, ""
	case errors.Is(stopped, store.ErrPruneUnfinished):
		return OutcomeInterrupted, "; stopped part way: its process ended before it finished"
	case errors.Is(stopped, context.DeadlineExceeded):
		return OutcomeInterrupted, "; stopped part way: its deadline passed"
	case errors.Is(stopped, context.Canceled):
		return OutcomeInterrupted, "; stopped part way: it was cancelled (a reload, a shutdown, or its client gone)"
	}
	return OutcomeInterrupted, "; stopped part way: a batch failed"
}

// Reverse lookups of client addresses for audit rows.
const (
	reverseLookupTimeout     = 100 * time.Millisecond
	reverseNameTTL           = 10 * time.Minute
	reverseNameNegativeTTL   = time.Minute
	reverseNameCacheCapacity = 4096
)

// Actor kinds: who asked for what an audit row records.
const (
	ActorAccount        = "acme_account"    // an ACME account, by kid
	ActorCertificateKey = "certificate_key" // the certificate's own key (id: its thumbprint)
	ActorAdmin          = "admin"           // Caddy's admin API
	ActorCLI            = "cli"             // caddy acme-proxy, over the admin API
	ActorSystem         = "system"          // this server on its own (jobs)
	ActorAccountKey     = "account_key"     // a key registering an account (id: its thumbprint)
	ActorWebUI          = "web_ui"          // the operator web page (id: the user Caddy authenticated)
)

// Actor is who asked for a change.
type Actor struct {
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
}

// Client is where a request came from, for audit rows: its address and
// its user agent, clipped to the audit row's bound (the HTTP front's
// clientOf), as a client carries it into job payloads and the relay's
// mapping before any row is written.
type Client struct {
	IP        string
	UserAgent string
}

// reverseNames resolves client addresses to names for audit rows, bounded
// in time (a request never waits on slow DNS for more than
// reverseLookupTimeout) and cached, failures included, so that a busy
// client or a dead resolver costs one lookup per TTL, not one per request.
type reverseNames struct {
	lookup func(ctx context.Context, addr string) ([]string, error)

	mu    sync.Mutex
	cache map[string]reverseName
}

type reverseName struct {
	name    string
	expires time.Time
}

func newReverseNames(lookup func(ctx context.Context, addr string) ([]string, error)) *reverseNames {
	if lookup == nil {
		lookup = net.DefaultResolver.LookupAddr
	}
	return &reverseNames{lookup: lookup, cache: map[string]reverseName{}}
}

// name returns the reverse name of ip, "" when it has none or the lookup
// failed or took too long.
func (n *reverseNames) name(ctx context.Context, ip string, now time.Time) string {
	if ip == "" || net.ParseIP(ip) == nil {
		return ""
	}
	n.mu.Lock()
	e, ok := n.cache[ip]
	n.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.name
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reverseLookupTimeout)
	names, err := n.lookup(lctx, ip)
	cancel()
	e = reverseName{expires: now.Add(reverseNameNegativeTTL)}
	if err == nil && len(names) > 0 {
		e = reverseName{name: strings.TrimSuffix(names[0], "."), expires: now.Add(reverseNameTTL)}
	}
	n.mu.Lock()
	if len(n.cache) >= reverseNameCacheCapacity {
		clear(n.cache)
	}
	n.cache[ip] = e
	n.mu.Unlock()
	return e.name
}

// event starts an audit row of this profile, at now, with cl's address,
// its reverse name and its user agent.
func (au *Authority) event(ctx context.Context, name, outcome string, actor Actor, cl Client) store.AuditEvent {
	now := au.clock.Now()
	return store.AuditEvent{
		At: now, Event: name, Outcome: outcome, Profile: au.cfg.Profile,
		ActorKind: actor.Kind, ActorID: actor.ID,
		ClientIP: cl.IP, ClientName: au.names.name(ctx, cl.IP, now), UserAgent: cl.UserAgent,
	}
}

// audit writes an audit row on its own. A failure is logged, never
// returned: the trail must not turn a done deed into an error.
func (au *Authority) audit(ctx context.Context, ev store.AuditEvent) {
	if err := au.db.InsertAudit(context.WithoutCancel(ctx), ev); err != nil {
		au.log.Error("writing an audit row", zap.String("event", "audit_write_failed"),
			zap.String("audit_event", ev.Event), zap.String("order", ev.OrderID), zap.Error(err))
	}
}

// AuditSweepKind is the periodic job that applies the audit retention.
const AuditSweepKind = "audit_sweep"

// UnfinishedPruneAfter is how long a prune's progress may stand still
// before the audit sweep takes its process for gone and writes its row
// (store.RecordUnfinishedPrunes): a prune running moves it on with every
// batch and every store.PruneHeartbeat (a minute), also while a batch
// runs, however slow; this leaves room for the clocks of instances to
// differ.
const UnfinishedPruneAfter = 15 * time.Minute

// SweepAudit first writes the row of each prune or sweep whose process
// ended part way, found by its progress standing still since
// UnfinishedPruneAfter before now (store.RecordUnfinishedPrunes). Then,
// unless retention is 0 (keep), it deletes the audit rows older than
// retention at now, in small batches, and records a sweep that deleted
// any in a row of its own (actor system), which later sweeps delete in
// turn.
func SweepAudit(ctx context.Context, db *store.DB, retention time.Duration, now time.Time) (int64, error) {
	if _, err := db.RecordUnfinishedPrunes(ctx, now.Add(-UnfinishedPruneAfter)); err != nil {
		return 0, err
	}
	if retention <= 0 {
		return 0, nil
	}
	before := now.Add(-retention)
	return db.PruneAudit(ctx, before, 0, clock.At(now), func(n int64, stopped error) (store.AuditEvent, bool) {
		outcome, why := PruneOutcome(stopped)
		return store.AuditEvent{At: now, Event: acme.EventAuditPruned, Outcome: outcome, ActorKind: ActorSystem, Reason: "retention",
			Detail: fmt.Sprintf("the retention sweep deleted %d audit rows older than %s (audit_retention %s)%s",
				n, before.UTC().Format(time.RFC3339), days(retention), why)}, n > 0
	})
}

// days writes a whole number of days as Caddy's duration syntax does ("400d").
func days(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
