package acmeproxy

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"

	"context"
	"fmt"
	"net/http"
	"path"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// validationJobs lists the challenge_validate jobs of the environment.
func validationJobs(t *testing.T, e *testEnv) []store.Job {
	t.Helper()
	js, err := e.db.ListJobs(context.Background(), store.JobFilter{Kind: authority.ValidateKind})
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A challenge whose answer is there settles in its own POST, recorded in
// one write: no validation job is stored, run or settled for it.
func TestAnAnswerThatIsThereSettlesInItsPOSTWithoutAJob(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"the expected key authorization", "", "valid"},
		{"a wrong answer", "wrong", "invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			alice := e.rawClient()
			alice.register()
			o := alice.order(dnsID("inline.example.com"))
			ch, r := alice.answerHTTP01(o.Authorizations[0], tc.body)
			got := decodeAs[challengeJSON](t, r)
			if r.status != http.StatusOK || string(got.Status) != tc.want {
				t.Fatalf("challenge POST: %d %s; want 200 with status %s", r.status, r.body, tc.want)
			}
			// The POST answered with the challenge as stored.
			if stored := decodeAs[challengeJSON](t, alice.read(ch.URL)); !reflect.DeepEqual(stored, got) {
				t.Errorf("the POST answered %+v; the challenge reads %+v", got, stored)
			}
			if js := validationJobs(t, e); len(js) != 0 {
				t.Errorf("%d validation jobs stored, want none: %+v", len(js), js)
			}
		})
	}
}

// An answer slower than a POST may wait is not judged by the POST's
// deadline: the POST answers processing, a durable job carries on with its
// own timeout, and the challenge becomes valid once the answer comes.
func TestAnAnswerSlowerThanThePOSTWaitsForIsValidatedByAJob(t *testing.T) {
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	o := alice.order(dnsID("slow.example.com"))
	ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeHTTP01)
	release := make(chan struct{})
	var once sync.Once
	e.http01.mu.Lock()
	e.http01.before = func(path string) {
		if strings.HasSuffix(path, ch.Token) {
			<-release // every fetch waits until the POST has answered
		}
	}
	e.http01.mu.Unlock()
	defer once.Do(func() { close(release) })
	e.http01.set(ch.Token, alice.keyAuthorization(ch.Token))

	r := alice.post(ch.URL, map[string]any{}, jwsOpts{})
	if got := decodeAs[challengeJSON](t, r); r.status != http.StatusOK || got.Status != "processing" {
		t.Fatalf("challenge POST: %d %s; want 200 with status processing", r.status, r.body)
	}
	if js := validationJobs(t, e); len(js) != 1 {
		t.Fatalf("%d validation jobs, want 1", len(js))
	}
	once.Do(func() { close(release) })
	alice.await(o.Authorizations[0], "valid")
}

// A fault on our side in the POST's attempt (no resolver answers for
// dns-01) is not the client's: the challenge is handed to the job, which
// retries, instead of being failed.
func TestAFaultOnOurSideInThePOSTsAttemptIsLeftToTheJob(t *testing.T) {
	e := newTestEnv(t, nil) // its resolvers (127.0.0.1:1) never answer
	alice := e.rawClient()
	alice.register()
	o := alice.order(dnsID("fault.example.com"))
	ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
	r := alice.post(ch.URL, map[string]any{}, jwsOpts{})
	if got := decodeAs[challengeJSON](t, r); r.status != http.StatusOK || got.Status != "processing" {
		t.Fatalf("challenge POST: %d %s; want 200 with status processing", r.status, r.body)
	}
	if js := validationJobs(t, e); len(js) != 1 {
		t.Fatalf("%d validation jobs, want 1", len(js))
	}
}

// A validation that could not be carried out on our side (the resolvers
// never answer) until its attempts were spent leaves the challenge
// invalid: the operator's log says so once, with the last fault, since no
// attempt's fault is logged on its own.
func TestAValidationAbandonedOnOurSideIsLoggedOnceWithItsFault(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	e := newTestEnvWith(t, envOptions{ // its resolvers (127.0.0.1:1) never answer
		opts:   func(o *Options) { o.Logger = zap.New(core) },
		runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond},
	})
	alice := e.rawClient()
	alice.register()
	o := alice.order(dnsID("abandoned.example.com"))
	ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
	alice.post(ch.URL, map[string]any{}, jwsOpts{})
	waitUntil(t, "the validation job's retirement", func() bool {
		js := validationJobs(t, e)
		return len(js) == 1 && js[0].Status == store.JobFailed
	})
	lines := logs.FilterField(zap.String("event", "challenge_abandoned")).All()
	if len(lines) != 1 {
		t.Fatalf("%d challenge_abandoned lines; want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["challenge"] != path.Base(ch.URL) || f["profile"] != e.srv.Profile() || !strings.Contains(fmt.Sprint(f["reason"]), "127.0.0.1:1") {
		t.Errorf("challenge_abandoned fields %v; want the challenge, the profile and the last fault (the resolver)", f)
	}
}
