package authority

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A revoke-cert that anyone can sign with a throwaway key must not cost a
// durable audit row each: refusals of requesters this profile cannot name
// are counted in memory by source and written as one summary row per
// source and interval (acme.EventRevocationRefusals). The refusals of a known
// requester — a valid account, or one shown entitled to revoke the
// certificate — keep a row each (see RevokeCert).
const (
	// RefusalInterval is how long unauthenticated refusals are counted
	// before their summary rows are written.
	RefusalInterval = 10 * time.Minute
	// refusalSources bounds the sources counted in one interval; the
	// refusals of any more share one overflow row.
	refusalSources = 1024
	// refusalUnwrittenMax bounds the intervals whose summary rows could
	// not be written (the database did not answer) that are kept to be
	// written at the next flush: an hour of them.
	refusalUnwrittenMax = 6
)

// Reason kinds of refused revocations: the metric's label values and the
// summary row's breakdown. The set is fixed.
const (
	RefusalMalformed          = "malformed"           // the payload or its certificate does not parse
	RefusalUnknownCertificate = "unknown_certificate" // no certificate with its serial here, or other bytes than the stored leaf
	RefusalNotAuthorized      = "not_authorized"      // signed by neither its key nor an account that may revoke it
	RefusalAlreadyRevoked     = "already_revoked"
	RefusalExpired            = "expired"       // past its notAfter, so no CRL would list it
	RefusalBadReason          = "bad_reason"    // not a reason the client may choose
	RefusalUnpublishable      = "unpublishable" // the certificate's CA can sign no CRL here (our side, not the client's)
)

// refusalSource is what refusals are counted by: the client's address, an
// IPv6 one by its /64 (what one host usually holds).
func refusalSource(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return store.Clip(ip, 64)
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// refusalTally counts unauthenticated refusals over one interval at a
// time. Its memory is bounded: at most capacity sources, then one overflow
// count. The interval starts with its first refusal.
type refusalTally struct {
	interval time.Duration
	capacity int
	// id tells this tally's summary rows from those of other instances
	// and profiles in their dedup keys.
	id string

	mu      sync.Mutex
	start   time.Time // of the interval counting; zero when nothing is
	sources map[string]*refusalCount
	over    refusalCount // refusals of the sources past capacity
	// unwritten are ended intervals whose rows a write failed to store,
	// oldest first, at most refusalUnwrittenMax.
	unwritten []*refusalWindow
}

// refusalCount is one source's refusals, in all and by reason kind.
type refusalCount struct {
	n     int
	kinds map[string]int
}

func (c *refusalCount) add(kind string) {
	if c.kinds == nil {
		c.kinds = map[string]int{}
	}
	c.n++
	c.kinds[kind]++
}

// refusalWindow is an interval's counts, taken out of the tally to be
// written.
type refusalWindow struct {
	start, end time.Time
	sources    map[string]*refusalCount
	over       refusalCount
}

func newRefusalTally() *refusalTally {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return &refusalTally{interval: RefusalInterval, capacity: refusalSources, id: hex.EncodeToString(id)}
}

// takeUnwritten returns the intervals kept since their write failed,
// with ended, if any, after them, to be written now.
func (t *refusalTally) takeUnwritten(ended *refusalWindow) []*refusalWindow {
	t.mu.Lock()
	defer t.mu.Unlock()
	ws := t.unwritten
	t.unwritten = nil
	if ended != nil {
		ws = append(ws, ended)
	}
	return ws
}

// keepUnwritten keeps ws, whose write failed, for the next one; past
// refusalUnwrittenMax the oldest are dropped, and their number returned.
func (t *refusalTally) keepUnwritten(ws []*refusalWindow) (dropped int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unwritten = append(ws, t.unwritten...)
	if n := len(t.unwritten) - refusalUnwrittenMax; n > 0 {
		t.unwritten, dropped = slices.Clone(t.unwritten[n:]), n
	}
	return dropped
}

// add counts one refusal from source at now. When the interval counting
// has ended by now, its counts are returned, to be written, and the
// refusal opens the next interval.
func (t *refusalTally) add(source, kind string, now time.Time) *refusalWindow {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ended *refusalWindow
	if !t.start.IsZero() && !now.Before(t.start.Add(t.interval)) {
		ended = t.takeLocked(t.start.Add(t.interval))
	}
	if t.start.IsZero() {
		t.start, t.sources = now, map[string]*refusalCount{}
	}
	c, ok := t.sources[source]
	switch {
	case ok:
	case len(t.sources) < t.capacity:
		c = &refusalCount{}
		t.sources[source] = c
	default:
		c = &t.over
	}
	c.add(kind)
	return ended
}

// due returns the counts of the interval counting when it has ended by
// now, or, when final, whatever is counted (its interval cut at now); nil
// when there is nothing to write.
func (t *refusalTally) due(now time.Time, final bool) *refusalWindow {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		return nil
	}
	end := t.start.Add(t.interval)
	if now.Before(end) {
		if !final {
			return nil
		}
		end = now
	}
	return t.takeLocked(end)
}

func (t *refusalTally) takeLocked(end time.Time) *refusalWindow {
	w := &refusalWindow{start: t.start, end: end, sources: t.sources, over: t.over}
	t.start, t.sources, t.over = time.Time{}, nil, refusalCount{}
	return w
}

// tallyRefusal counts a refusal of a requester this profile cannot name,
// and writes the summary rows of the interval it ends, if any.
func (au *Authority) tallyRefusal(ctx context.Context, cl Client, kind string) {
	if w := au.refusals.add(refusalSource(cl.IP), kind, au.clock.Now()); w != nil {
		au.writeRefusals(ctx, au.refusals.takeUnwritten(w))
	}
}

// FlushRefusals writes the summary rows of unauthenticated revoke-cert
// refusals whose interval has ended; with final, those of the interval
// still counting too (the profile is going away). The app calls it every
// minute and at stop: the counts live in this process's memory only.
func (au *Authority) FlushRefusals(ctx context.Context, final bool) {
	if ws := au.refusals.takeUnwritten(au.refusals.due(au.clock.Now(), final)); len(ws) > 0 {
		au.writeRefusals(ctx, ws)
	}
}

// writeRefusals writes the summary rows of ended intervals in one
// transaction: per interval, one per source, by address order, and one
// for the overflow. A failure is logged, and the intervals are kept to be
// written again at the next flush (counts of refusals nobody else
// records); each row's dedup key makes a write that landed although it
// failed count once.
func (au *Authority) writeRefusals(ctx context.Context, ws []*refusalWindow) {
	now := au.clock.Now()
	var evs []store.AuditEvent
	for _, w := range ws {
		span := fmt.Sprintf("in the %s from %s", w.end.Sub(w.start).Round(time.Second), w.start.UTC().Format(time.RFC3339))
		row := func(ip string, c refusalCount, from, key string) store.AuditEvent {
			return store.AuditEvent{At: now, Event: acme.EventRevocationRefusals, Outcome: OutcomeRefused, Profile: au.cfg.Profile,
				ActorKind: ActorSystem, ClientIP: ip, Reason: kindsText(c.kinds),
				Detail: fmt.Sprintf("%d refused revocation requests from %s %s, none signed by a valid account or by the certificate's key",
					c.n, from, span),
				DedupKey: fmt.Sprintf("%s/%s/%d/%s", acme.EventRevocationRefusals, au.refusals.id, w.start.UnixNano(), key)}
		}
		for _, src := range slices.Sorted(maps.Keys(w.sources)) {
			evs = append(evs, row(src, *w.sources[src], src, "source "+src))
		}
		if w.over.n > 0 {
			evs = append(evs, row("", w.over, fmt.Sprintf("sources past the first %d", au.refusals.capacity), "overflow"))
		}
	}
	if err := au.db.InsertAudits(context.WithoutCancel(ctx), evs); err != nil {
		dropped := au.refusals.keepUnwritten(ws)
		au.log.Error("writing the summary of refused revocations; kept for the next flush", zap.String("event", "audit_write_failed"),
			zap.String("audit_event", acme.EventRevocationRefusals), zap.String("profile", au.cfg.Profile),
			zap.Int("intervals_dropped", dropped), zap.Error(err))
	}
}

// kindsText is a count's breakdown by reason kind: "malformed=3 not_authorized=1".
func kindsText(kinds map[string]int) string {
	parts := make([]string, 0, len(kinds))
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		parts = append(parts, k+"="+strconv.Itoa(kinds[k]))
	}
	return strings.Join(parts, " ")
}
