package acmeproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// seriesRecorder is a Metrics that keeps every distinct series (metric
// and label values) it was asked to move: what Prometheus would hold.
type seriesRecorder struct {
	mu     sync.Mutex
	series map[string]bool
}

func (m *seriesRecorder) add(name string, labels ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.series == nil {
		m.series = map[string]bool{}
	}
	m.series[name+"{"+strings.Join(labels, ",")+"}"] = true
}

func (m *seriesRecorder) Request(profile, route string, status int, _ time.Duration) {
	m.add("requests", profile, route, fmt.Sprint(status))
}
func (m *seriesRecorder) Issued(profile string)              { m.add("issued", profile) }
func (m *seriesRecorder) IssueFailed(profile, reason string) { m.add("failed", profile, reason) }
func (m *seriesRecorder) IssueDeferred(profile, reason string) {
	m.add("deferred", profile, reason)
}
func (m *seriesRecorder) Revoked(profile string) { m.add("revoked", profile) }
func (m *seriesRecorder) Validated(profile, challenge, outcome string) {
	m.add("validations", profile, challenge, outcome)
}
func (m *seriesRecorder) RevocationRefused(profile, reason string) {
	m.add("revocations_refused", profile, reason)
}
func (m *seriesRecorder) RateLimited(profile, limit string) { m.add("rate_limited", profile, limit) }

func (m *seriesRecorder) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for s := range m.series {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

var (
	_ authority.Metrics      = (*seriesRecorder)(nil)
	_ authority.LimitMetrics = (*seriesRecorder)(nil)
)

// A metric label takes its values from closed sets — profile and route
// names, status codes, challenge types, outcomes, reason and limit
// names — never from what a client sends. Rounds of requests carrying new
// values each (accounts, identifiers, user agents, unknown paths and ids,
// failed validations with their problem details, refused revocations,
// rate-limited orders) add no series after the first, and no series
// carries any of those values.
func TestMetricSeriesStayBoundedWhateverValuesClientsSend(t *testing.T) {
	m := &seriesRecorder{}
	e := newTestEnvWith(t, envOptions{
		mutate: func(c *ProfileConfig) {
			c.Limits = everyLimitOff()
			c.Limits.OrdersPerAccount = rate(1, time.Hour)
		},
		opts: func(o *Options) { o.Metrics = m },
	})
	var sent []string // every client-chosen value, to be found in no series
	round := func(r int) {
		for k := range 3 {
			tag := fmt.Sprintf("r%dk%dz", r, k)
			ua := "agent/" + tag
			c := e.rawClient()
			c.register()
			sent = append(sent, tag, c.kid[strings.LastIndex(c.kid, "/")+1:])
			post := func(path string, payload any) rawResponse {
				b, _ := json.Marshal(payload)
				if payload == nil {
					b = nil
				}
				return c.postAs(ua, path, b, jwsOpts{})
			}
			name := tag + ".example.com"
			order := post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(name)}})
			if order.status != http.StatusCreated {
				t.Fatalf("new-order: %d %s", order.status, order.body)
			}
			if r := post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("second-" + name)}}); r.status != http.StatusTooManyRequests {
				t.Fatalf("a second order past orders_per_account: %d %s", r.status, r.body)
			}
			// A failed validation: nothing answers the challenge.
			var o struct{ Authorizations []string }
			_ = json.Unmarshal(order.body, &o)
			var az struct{ Challenges []struct{ Type, URL string } }
			_ = json.Unmarshal(post(o.Authorizations[0], nil).body, &az)
			for _, ch := range az.Challenges {
				if ch.Type == "http-01" {
					post(ch.URL, map[string]any{})
				}
			}
			// Refused revocations, unknown resources and paths.
			post(e.url("/revoke-cert"), map[string]any{"certificate": b64([]byte(tag)), "reason": k + 90})
			post(e.url("/order/"+tag), nil)
			post(e.url("/order/"+tag+"/refund"), nil)
			post(e.url("/"+tag), nil)
			e.plain(http.MethodGet, e.url("/crl/"+tag))
			e.plain(http.MethodGet, e.url("/renewal-info/"+tag+"."+tag))
			e.plain(http.MethodDelete, e.url("/new-order"))
			e.plain(http.MethodGet, e.url("/"+tag+"/../directory"))
		}
	}
	round(1)
	first := m.all()
	round(2)
	round(3)
	if after := m.all(); len(after) != len(first) {
		t.Errorf("new client values made new series: %d after the first round, %d after three:\n%s",
			len(first), len(after), strings.Join(after, "\n"))
	}
	for _, s := range m.all() {
		for _, v := range sent {
			if strings.Contains(s, v) {
				t.Errorf("series %s carries the client's %q", s, v)
			}
		}
	}
	// The rounds reached what they meant to: the series they should move.
	for _, want := range []string{"validations{test,http-01,invalid}", "rate_limited{test,orders_per_account}",
		"revocations_refused{test,malformed}", "requests{test,other,404}"} {
		if !m.series[want] {
			t.Errorf("no series %s among:\n%s", want, strings.Join(m.all(), "\n"))
		}
	}
}
