package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/mholt/acmez/v3/acme"
)

// What the relay decides from the upstream's directory, it reads itself.
// acmez keeps a directory for twelve hours, process-wide, keyed by its
// URL: an upstream that begins offering a certificate profile or renewal
// information would stay unseen for half a day, even across a Caddy
// reload, which builds new signers. The endpoints acmez reads from its
// copy do not change in practice; what an upstream offers does.

const (
	// directoryHold is how long a signer keeps what it read: a change
	// upstream is seen within it, or at the next reload.
	directoryHold = 5 * time.Minute
	// maxDirectoryBytes bounds the directory read; real ones are below
	// 2 KiB.
	maxDirectoryBytes = 1 << 20
)

// upstreamOffer is what the upstream's directory offers: its certificate
// profiles, by name, and whether it answers renewal information (RFC
// 9773 §3).
type upstreamOffer struct {
	profiles    []string // sorted
	renewalInfo bool
}

// offer is what the upstream's directory offers, read through c (whose
// transport notes the request) at most once per directoryHold.
func (s *Signer) offer(ctx context.Context, c *acme.Client) (upstreamOffer, error) {
	now := s.clock.Now()
	s.mu.Lock()
	if now.Before(s.offerUntil) {
		o := s.offered
		s.mu.Unlock()
		return o, nil
	}
	s.mu.Unlock()
	o, err := readOffer(ctx, c)
	if err != nil {
		return upstreamOffer{}, fmt.Errorf("reading the upstream directory: %w", err)
	}
	s.mu.Lock()
	s.offered, s.offerUntil = o, now.Add(directoryHold)
	s.mu.Unlock()
	return o, nil
}

func readOffer(ctx context.Context, c *acme.Client) (upstreamOffer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Directory, nil)
	if err != nil {
		return upstreamOffer{}, err
	}
	req.Header.Set("User-Agent", c.UserAgent)
	resp, err := c.HTTPClient.Do(req)
	if err != nil {
		return upstreamOffer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return upstreamOffer{}, fmt.Errorf("the upstream answered %s", resp.Status)
	}
	var dir struct {
		RenewalInfo string `json:"renewalInfo"`
		Meta        struct {
			Profiles map[string]json.RawMessage `json:"profiles"`
		} `json:"meta"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDirectoryBytes)).Decode(&dir); err != nil {
		return upstreamOffer{}, fmt.Errorf("the directory is not JSON: %w", err)
	}
	return upstreamOffer{profiles: slices.Sorted(maps.Keys(dir.Meta.Profiles)), renewalInfo: dir.RenewalInfo != ""}, nil
}
