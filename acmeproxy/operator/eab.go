package operator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// EABKeyView describes an external account binding key, never with its
// MAC key.
type EABKeyView struct {
	KID          string         `json:"kid"`
	Profile      string         `json:"profile"`
	Label        string         `json:"label"`
	Reusable     bool           `json:"reusable"`
	State        store.EABState `json:"state"`
	Created      time.Time      `json:"created"`
	Expires      *time.Time     `json:"expires,omitempty"`
	Revoked      *time.Time     `json:"revoked,omitempty"`
	Used         *time.Time     `json:"used,omitempty"`
	BoundAccount string         `json:"bound_account,omitempty"`
	BoundCount   int            `json:"bound_count"`
}

// MintedEABKey is a key just minted: the only view with its MAC key,
// base64url as clients take it (certbot --eab-hmac-key, lego --hmac).
type MintedEABKey struct {
	EABKeyView
	HMACKey string `json:"hmac_key"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (op *Operator) eabView(k store.EABKey) EABKeyView {
	return EABKeyView{KID: k.KID, Profile: k.Profile, Label: k.Label, Reusable: k.Reusable, State: k.State(op.now()),
		Created: k.Created, Expires: optTime(k.Expires), Revoked: optTime(k.Revoked), Used: optTime(k.Used),
		BoundAccount: k.BoundAccount, BoundCount: k.BoundCount}
}

// eabAuthority is the mounted authority of profile.
func (op *Operator) eabAuthority(profile string) (*authority.Authority, error) {
	if profile == "" {
		return nil, fmt.Errorf("%w: an EAB key belongs to a profile; name it", ErrInvalid)
	}
	au, ok := op.Profiles.Lookup(profile)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotMounted, profile)
	}
	return au, nil
}

// CreateEABKey mints a key for profile labelled label, reusable or
// single-use, expiring after ttl (0: never). The answer is the only one
// that carries the MAC key.
func (op *Operator) CreateEABKey(ctx context.Context, profile, label string, reusable bool, ttl time.Duration, actor authority.Actor) (MintedEABKey, error) {
	if profile == "" {
		return MintedEABKey{}, fmt.Errorf("%w: an EAB key belongs to a profile; name it", ErrInvalid)
	}
	au, ok := op.Profiles.Lookup(profile)
	if !ok {
		// A key is minted where its profile is configured: a name this
		// instance does not serve is most likely a typo.
		return MintedEABKey{}, fmt.Errorf("%w: profile %q (this instance serves %s)", store.ErrNotFound, Clip(profile), op.profileNames())
	}
	if au.EABConfig() == "" {
		return MintedEABKey{}, fmt.Errorf("%w: profile %s takes no external account bindings (its configuration has no eab); a key for it would bind nothing",
			ErrConflict, profile)
	}
	if strings.TrimSpace(label) == "" || len(label) > store.AuditFieldMax {
		return MintedEABKey{}, fmt.Errorf("%w: a label of 1 to %d bytes, not only blanks, is required", ErrInvalid, store.AuditFieldMax)
	}
	// A label is shown in tables, logs and the web page: a line break or
	// other control character would forge or break their rows.
	if !utf8.ValidString(label) || strings.IndexFunc(label, unicode.IsControl) >= 0 {
		return MintedEABKey{}, fmt.Errorf("%w: a label is printable UTF-8 text, without control characters", ErrInvalid)
	}
	if ttl < 0 {
		return MintedEABKey{}, fmt.Errorf("%w: expires must not be negative", ErrInvalid)
	}
	k, err := au.MintEABKey(ctx, label, reusable, ttl, actor)
	if err != nil {
		return MintedEABKey{}, err
	}
	return MintedEABKey{EABKeyView: op.eabView(k), HMACKey: base64.RawURLEncoding.EncodeToString(k.HMACKey)}, nil
}

// profileNames lists the mounted profiles, for a message.
func (op *Operator) profileNames() string {
	var names []string
	for _, au := range op.Profiles.All() {
		names = append(names, au.Profile())
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// ListEABKeys lists a page of a profile's keys, newest first.
func (op *Operator) ListEABKeys(ctx context.Context, f store.EABKeyFilter) (Page[EABKeyView], error) {
	if f.Profile == "" {
		return Page[EABKeyView]{}, fmt.Errorf("%w: name the profile whose EAB keys to list", ErrInvalid)
	}
	if f.After != "" {
		profile, err := op.DB.EABKeyProfile(ctx, f.After)
		if err != nil {
			return Page[EABKeyView]{}, afterErr("EAB key", f.After, err)
		}
		if profile != f.Profile {
			return Page[EABKeyView]{}, fmt.Errorf("%w: after: EAB key %q is of profile %s, not %s (a page continues after the last key of the previous page)",
				ErrInvalid, Clip(f.After), Clip(profile), Clip(f.Profile))
		}
	}
	keys, err := op.DB.ListEABKeys(ctx, f)
	if err != nil {
		return Page[EABKeyView]{}, err
	}
	views := make([]EABKeyView, len(keys))
	for i, k := range keys {
		views[i] = op.eabView(k)
	}
	return page(views, store.PageLimit(f.Limit), func(v EABKeyView) string { return v.KID }), nil
}

// RevokeEABKey revokes key kid: it binds no new account; the accounts it
// bound keep their binding.
func (op *Operator) RevokeEABKey(ctx context.Context, kid string, actor authority.Actor) (EABKeyView, error) {
	profile, err := op.DB.EABKeyProfile(ctx, kid)
	if err != nil {
		return EABKeyView{}, err
	}
	au, err := op.eabAuthority(profile)
	if err != nil {
		return EABKeyView{}, err
	}
	k, err := au.RevokeEABKey(ctx, kid, actor)
	if errors.Is(err, store.ErrWrongState) {
		return EABKeyView{}, fmt.Errorf("%w: EAB key %s is already revoked", ErrConflict, kid)
	}
	if err != nil {
		return EABKeyView{}, err
	}
	return op.eabView(k), nil
}
