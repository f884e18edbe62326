package acmeproxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// RenewalInfoConfig places the renewal windows of a profile's
// certificates (RFC 9773).
type RenewalInfoConfig struct {
	// Point is where in a certificate's life its window is centred, a
	// fraction of its lifetime above 0 and below 1; default 2/3 (the
	// window opens as the last third begins, as Let's Encrypt's).
	Point float64 `json:"point,omitempty"`
	// RetryAfter is how long an answer holds, sent as Retry-After and as
	// the answer's max-age; default 6h.
	RetryAfter Duration `json:"retry_after,omitempty"`
}

// authority is the configuration as the authority takes it; nil is the
// defaults.
func (c *RenewalInfoConfig) authority() authority.RenewalConfig {
	if c == nil {
		return authority.RenewalConfig{}
	}
	return authority.RenewalConfig{Point: c.Point, RetryAfter: time.Duration(c.RetryAfter)}
}

// faultRetryAfter is the Retry-After of a renewalInfo request that failed
// on our side.
const faultRetryAfter = time.Minute

// renewalInfoJSON is a RenewalInfo object (RFC 9773 §4.2).
type renewalInfoJSON struct {
	SuggestedWindow struct {
		Start string `json:"start"`
		End   string `json:"end"`
	} `json:"suggestedWindow"`
	ExplanationURL string `json:"explanationURL,omitempty"`
}

// handleRenewalInfo answers GET renewal-info/{certID} (RFC 9773 §4.1),
// unauthenticated, with the certificate's suggested window. Every
// answer, a problem too, carries Retry-After (§4.3); a window may be
// cached for as long, and so carries no Replay-Nonce.
func (s *Server) handleRenewalInfo(w http.ResponseWriter, r *http.Request, certID string) error {
	info, err := s.core.RenewalInfo(r.Context(), certID)
	if err != nil {
		// A refusal holds as long as a window would; a fault of ours is
		// worth asking again about soon (a store that cannot take
		// writes sets its own).
		after := faultRetryAfter
		if p, ok := problem.As(err); ok && p.Status < http.StatusInternalServerError {
			after = s.renewalRetryAfter()
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(after/time.Second)))
		return err
	}
	secs := strconv.Itoa(int(info.RetryAfter / time.Second))
	w.Header().Set("Retry-After", secs)
	w.Header().Set("Cache-Control", "public, max-age="+secs)
	// A cached answer must not hand one nonce to many clients.
	w.Header().Del("Replay-Nonce")
	var out renewalInfoJSON
	out.SuggestedWindow.Start = info.Start.UTC().Format(time.RFC3339)
	out.SuggestedWindow.End = info.End.UTC().Format(time.RFC3339)
	out.ExplanationURL = info.ExplanationURL
	s.writeJSON(w, http.StatusOK, out)
	return nil
}

// renewalRetryAfter is the profile's Retry-After for renewalInfo.
func (s *Server) renewalRetryAfter() time.Duration {
	if d := time.Duration(s.cfg.RenewalInfo.authority().RetryAfter); d > 0 {
		return d
	}
	return authority.DefaultRenewalRetryAfter
}
