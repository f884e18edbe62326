package acmeproxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// authzJSON is an authorization object (RFC 8555 §7.1.4). A wildcard's
// identifier is its base name, with wildcard: true.
type authzJSON struct {
	Identifier acme.Identifier `json:"identifier"`
	Status     acme.Status     `json:"status"`
	Expires    string          `json:"expires,omitempty"`
	Challenges []challengeJSON `json:"challenges"`
	Wildcard   bool            `json:"wildcard,omitempty"`
}

// challengeJSON is a challenge object (RFC 8555 §7.1.5, §8).
type challengeJSON struct {
	Type      string          `json:"type"`
	URL       string          `json:"url"`
	Status    acme.Status     `json:"status"`
	Token     string          `json:"token"`
	Validated string          `json:"validated,omitempty"`
	Error     json.RawMessage `json:"error,omitempty"`
}

// authzJSON is an authorization as its client sees it. RFC 8555 §7.1.4:
// a pending one lists the challenges the client may answer, a valid one
// the challenge that was validated (still once it has expired), an
// invalid one the challenge that was attempted and failed. One that ended
// otherwise (deactivated, expired while pending, or invalid with no
// challenge attempted) keeps them all, rather than an empty list.
func (s *Server) authzJSON(base string, a store.Authz) authzJSON {
	out := authzJSON{
		Identifier: acme.Identifier(a.Identifier), Status: s.core.AuthzStatus(a),
		Expires: rfc3339(a.Expires), Wildcard: a.Wildcard, Challenges: []challengeJSON{},
	}
	decided := a.Status == acme.StatusValid || a.Status == acme.StatusInvalid
	for _, c := range a.Challenges {
		if !decided || c.Status == a.Status {
			out.Challenges = append(out.Challenges, challengeJSONOf(base, c))
		}
	}
	if len(out.Challenges) == 0 {
		for _, c := range a.Challenges {
			out.Challenges = append(out.Challenges, challengeJSONOf(base, c))
		}
	}
	return out
}

func challengeJSONOf(base string, c store.Challenge) challengeJSON {
	return challengeJSON{Type: c.Type, URL: base + "/chall/" + c.ID, Status: c.Status, Token: c.Token,
		Validated: rfc3339(c.Validated), Error: c.Error}
}

// handleAuthz reads or deactivates an authorization (RFC 8555 §7.5, §7.5.2).
func (s *Server) handleAuthz(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := store.WithFirstRead(r.Context(), store.FirstReadOfAuthz(id))
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	a, err := s.core.OwnAuthz(ctx, req.account.ID, id)
	if err != nil {
		return err
	}
	if !req.postAsGet {
		var p struct {
			Status acme.Status `json:"status"`
		}
		if err := decodePayload(req.payload, &p); err != nil {
			return err
		}
		if p.Status != acme.StatusDeactivated {
			return problem.MalformedF("an authorization's status may only be set to deactivated")
		}
		if a, err = s.core.DeactivateAuthz(ctx, a); err != nil {
			return err
		}
	}
	for _, c := range a.Challenges {
		if c.Status == acme.StatusProcessing {
			w.Header().Set("Retry-After", strconv.Itoa(int(s.core.ChallengeRetryAfter(ctx, c)/time.Second)))
			break
		}
	}
	s.writeJSON(w, http.StatusOK, s.authzJSON(s.baseURL(r), a))
	return nil
}

// handleChallenge reads a challenge (POST-as-GET) or asks for its
// validation (POST {}, RFC 8555 §7.5.1): tried at once within the request,
// else handed to a challenge_validate job and answered processing
// (authority.AnswerChallenge).
func (s *Server) handleChallenge(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := store.WithFirstRead(r.Context(), store.FirstReadOfChallenge(id))
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	c, a, err := s.core.OwnChallenge(ctx, req.account.ID, id)
	if err != nil {
		return err
	}
	base := s.baseURL(r)
	if !req.postAsGet {
		// RFC 8555 §7.5.1: the client answers with a JSON object ({});
		// anything else is a broken client, which must not start the
		// one validation the challenge gets.
		var answer map[string]json.RawMessage
		if err := decodePayload(req.payload, &answer); err != nil {
			return err
		}
	}
	if !req.postAsGet && c.Status == acme.StatusPending {
		if c, err = s.core.AnswerChallenge(ctx, c, a, req.thumbprint, clientOf(r)); err != nil {
			return err
		}
	}
	w.Header().Add("Link", link(base+"/authz/"+a.ID, "up"))
	if c.Status == acme.StatusProcessing {
		// RFC 8555 §8.2: tell the client when to look again.
		w.Header().Set("Retry-After", strconv.Itoa(int(s.core.ChallengeRetryAfter(ctx, c)/time.Second)))
	}
	s.writeJSON(w, http.StatusOK, challengeJSONOf(base, c))
	return nil
}
