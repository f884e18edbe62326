package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Placing the upstream order with prepare_upstream on.
//
// Two parties may set out to place the upstream order of one local
// order: its preparation, on the instance the new-order reached, and its
// relay, on the instance running the relay_issue job — another one when
// the finalize reached another instance, or when the first died. Each
// claims the placement in the store first (store.ClaimRelayPlacement),
// for placementClaim; only the claim's owner places the order, and it
// records the order's URL there at once. The other waits for that URL
// and relays it, or, once the claim lapsed with no URL (its owner died
// before placing the order, or while doing it), takes the claim over.
//
// The owner places within its claim: its newOrder is cancelled
// placementMargin before the claim lapses, so that no owner places an
// order after another may have taken over. What remains is an owner that
// dies (or loses the database) after its newOrder reached the upstream
// and before the answer is recorded: that upstream order is never
// finalized and expires upstream, and the one taking over places
// another.
const (
	placementClaim  = time.Minute
	placementMargin = 15 * time.Second
)

// placement is a claim this process holds on placing the upstream order
// of a local order.
type placement struct {
	db    *store.DB
	order string
	owner string
	until time.Time
}

// claimPlacement claims placing orderID's upstream order, once: it
// returns the claim when this process won it, else the placement as the
// store has it (an upstream order recorded, or another's live claim).
func (s *Signer) claimPlacement(ctx context.Context, db *store.DB, orderID string) (*placement, store.RelayPlacement, error) {
	now := s.clock.Now()
	owner := store.NewID()
	p, won, err := db.ClaimRelayPlacement(ctx, orderID, owner, now, now.Add(placementClaim))
	if err != nil || !won {
		return nil, p, err
	}
	return &placement{db: db, order: orderID, owner: owner, until: p.Until}, p, nil
}

// place runs placeFn, which places the upstream order, within the claim:
// it is cancelled placementMargin before the claim lapses. A placement
// that failed releases the claim, so that a waiting relay places the
// order at once rather than when the claim lapses.
func (c *placement) place(ctx context.Context, now time.Time, placeFn func(context.Context) (acme.Order, error)) (acme.Order, error) {
	pctx, cancel := context.WithTimeout(ctx, c.until.Sub(now)-placementMargin)
	defer cancel()
	order, err := placeFn(pctx)
	if err != nil {
		if rerr := c.db.ReleaseRelayPlacement(context.WithoutCancel(ctx), c.order, c.owner); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return order, err
	}
	return order, nil
}

// record records url, placed under the claim, and returns the upstream
// order the placement names afterwards: url, or another's when the claim
// lapsed and was taken over (then url is never finalized).
func (c *placement) record(ctx context.Context, url string, now time.Time) (string, error) {
	p, err := c.db.RecordRelayPlacement(ctx, c.order, c.owner, url, now)
	switch {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", err
	case err != nil || !p.Placed():
		return "", fmt.Errorf("the claim on placing the upstream order lapsed before %s was recorded; it is left unfinalized", url)
	}
	return p.UpstreamOrderURL, nil
}

// awaitPlacement returns the upstream order placed for orderID, waiting
// while another's live claim is placing it; or, when none is placed and
// no live claim stands, the claim this process took to place it. The
// wait ends with ctx.
func (s *Signer) awaitPlacement(ctx context.Context, b *signer.Binding, orderID string) (string, *placement, error) {
	wait := s.opts.PollInterval
	told := false
	for {
		p, err := b.DB.GetRelayPlacement(ctx, orderID)
		switch {
		case err == nil && p.Placed():
			return p.UpstreamOrderURL, nil, nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return "", nil, err
		}
		// A preparation records its order in its relay_prepared job
		// first (durably), in the placement next: one that died in
		// between left its order there. So did a version that had no
		// placements.
		if url, err := s.preparedJob(ctx, b, orderID); err != nil || url != "" {
			return url, nil, err
		}
		if err != nil || !p.Until.After(s.clock.Now()) {
			var c *placement
			if c, p, err = s.claimPlacement(ctx, b.DB, orderID); err != nil || c != nil {
				return "", c, err
			}
			if p.Placed() {
				return p.UpstreamOrderURL, nil, nil
			}
		}
		// Another's live claim: its owner is placing the order.
		if !told && s.awaitingPlacement != nil {
			s.awaitingPlacement()
		}
		told = true
		d := min(wait, max(p.Until.Sub(s.clock.Now()), 0))
		wait = min(2*wait, s.opts.MaxPoll)
		if err := pause(ctx, d); err != nil {
			return "", nil, fmt.Errorf("waiting for another instance to place the upstream order: %w", err)
		}
	}
}
