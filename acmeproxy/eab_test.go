package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/acme"

	jose "github.com/go-jose/go-jose/v4"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// eabEnv is a profile with the binding rule mode, a fake clock and its
// logs observed.
func eabEnv(t *testing.T, mode string) (*testEnv, *clocktest.Fake, *observer.ObservedLogs) {
	t.Helper()
	clk := clocktest.New(time.Now())
	core, logs := observer.New(zap.DebugLevel)
	e := newTestEnvWith(t, envOptions{
		mutate: func(c *ProfileConfig) { c.EAB = mode },
		opts:   func(o *Options) { o.Clock, o.Logger = clk, zap.New(core) },
	})
	return e, clk, logs
}

func mint(t *testing.T, e *testEnv, label string, reusable bool, ttl time.Duration) store.EABKey {
	t.Helper()
	k, err := e.srv.Authority().MintEABKey(context.Background(), label, reusable, ttl, authority.Actor{Kind: authority.ActorAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newAccountClient(e *testEnv) *acme.Client {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	return &acme.Client{Key: key, DirectoryURL: e.dirURL, HTTPClient: e.ts.Client()}
}

func registerWith(ctx context.Context, c *acme.Client, k *store.EABKey) (*acme.Account, error) {
	a := &acme.Account{Contact: []string{"mailto:ops@example.com"}}
	if k != nil {
		a.ExternalAccountBinding = &acme.ExternalAccountBinding{KID: k.KID, Key: k.HMACKey}
	}
	return c.Register(ctx, a, acme.AcceptTOS)
}

func wantACMEProblem(t *testing.T, err error, typ vocab.ProblemType, detail string) {
	t.Helper()
	var ae *acme.Error
	if !errors.As(err, &ae) || ae.ProblemType != string(typ) || !strings.Contains(ae.Detail, detail) {
		t.Fatalf("err %v; want %s with detail containing %q", err, typ, detail)
	}
}

func TestARequiredProfileRefusesABareAccountAndSaysSoInItsDirectory(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{authority.EABRequired, authority.EABOptional, ""} {
		t.Run("eab="+mode, func(t *testing.T) {
			e, _, _ := eabEnv(t, mode)
			c := newAccountClient(e)
			dir, err := c.Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if dir.ExternalAccountRequired != (mode == authority.EABRequired) {
				t.Errorf("directory externalAccountRequired %v with eab %q", dir.ExternalAccountRequired, mode)
			}
			_, err = registerWith(ctx, c, nil)
			if mode == authority.EABRequired {
				wantACMEProblem(t, err, vocab.ErrorExternalAccountRequired, "external account binding")
			} else if err != nil {
				t.Fatalf("a bare account with eab %q: %v", mode, err)
			}
		})
	}
}

func TestAMintedKeyBindsOneAccountWhichKeepsItsLabel(t *testing.T) {
	ctx := context.Background()
	e, _, _ := eabEnv(t, authority.EABRequired)
	k := mint(t, e, "team-a", false, 0)
	c := newAccountClient(e)
	acct, err := registerWith(ctx, c, &k)
	if err != nil {
		t.Fatalf("register with a fresh key: %v", err)
	}
	id := acct.URI[strings.LastIndex(acct.URI, "/")+1:]
	stored, err := e.db.GetAccount(ctx, "test", id)
	if err != nil || stored.EABKID != k.KID || stored.EABLabel != "team-a" {
		t.Fatalf("account %+v %v; want bound to %s labelled team-a", stored, err, k.KID)
	}
	// onlyReturnExisting (GetReg) finds the account without a binding.
	if got, err := c.GetReg(ctx, ""); err != nil || got.URI != acct.URI {
		t.Fatalf("GetReg: %v %v; want %s", got, err, acct.URI)
	}
	// A second account with the same single-use key is refused.
	_, err = registerWith(ctx, newAccountClient(e), &k)
	wantACMEProblem(t, err, vocab.ErrorUnauthorized, "already used")
	keys, err := e.srv.Authority().EABKeys(ctx, store.EABKeyFilter{})
	if err != nil || len(keys) != 1 || keys[0].BoundAccount != id || keys[0].State(time.Now()) != store.EABBound {
		t.Fatalf("keys %+v %v; want one bound to %s", keys, err, id)
	}
}

func TestAReusableKeyBindsManyAccounts(t *testing.T) {
	ctx := context.Background()
	e, _, _ := eabEnv(t, authority.EABOptional)
	k := mint(t, e, "fleet", true, 0)
	for i := range 3 {
		if _, err := registerWith(ctx, newAccountClient(e), &k); err != nil {
			t.Fatalf("account %d: %v", i, err)
		}
	}
}

// eabJWS builds an external account binding by hand.
type eabJWS struct {
	alg     string
	kid     string
	url     string
	nonce   bool
	payload []byte // default: the outer key's JWK
	macKey  []byte
	extra   map[string]any // more protected header parameters
}

func (b eabJWS) build(t *testing.T, outer *ecdsa.PrivateKey) json.RawMessage {
	t.Helper()
	hdr := map[string]any{"alg": b.alg, "kid": b.kid, "url": b.url}
	if b.nonce {
		hdr["nonce"] = "abc"
	}
	for k, v := range b.extra {
		hdr[k] = v
	}
	h, _ := json.Marshal(hdr)
	payload := b.payload
	if payload == nil {
		payload, _ = jose.JSONWebKey{Key: outer.Public()}.MarshalJSON()
	}
	prot, pl := base64.RawURLEncoding.EncodeToString(h), base64.RawURLEncoding.EncodeToString(payload)
	newHash := sha256.New
	switch b.alg {
	case "HS384":
		newHash = sha512.New384
	case "HS512":
		newHash = sha512.New
	}
	mac := hmac.New(newHash, b.macKey)
	mac.Write([]byte(prot + "." + pl))
	out, _ := json.Marshal(map[string]string{"protected": prot, "payload": pl,
		"signature": base64.RawURLEncoding.EncodeToString(mac.Sum(nil))})
	return out
}

func TestBadBindingsAreRefusedWithAClearDetailAndAnAuditRow(t *testing.T) {
	ctx := context.Background()
	e, clk, _ := eabEnv(t, authority.EABRequired)
	newAcct := e.url("/new-account")
	good := mint(t, e, "good", false, 0)
	revoked := mint(t, e, "revoked", false, 0)
	if _, err := e.srv.Authority().RevokeEABKey(ctx, revoked.KID, authority.Actor{Kind: authority.ActorAdmin}); err != nil {
		t.Fatal(err)
	}
	expiring := mint(t, e, "expiring", false, time.Hour)
	used := mint(t, e, "used", false, 0)
	if _, err := registerWith(ctx, newAccountClient(e), &used); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherJWK, _ := jose.JSONWebKey{Key: otherKey.Public()}.MarshalJSON()

	cases := []struct {
		name   string
		eab    eabJWS
		typ    vocab.ProblemType
		status int
		detail string
	}{
		{"a wrong MAC", eabJWS{alg: "HS256", kid: good.KID, url: newAcct, macKey: []byte("not the key")},
			vocab.ErrorUnauthorized, http.StatusForbidden, "MAC does not verify"},
		{"a wrong url", eabJWS{alg: "HS256", kid: good.KID, url: e.url("/new-order"), macKey: good.HMACKey},
			vocab.ErrorUnauthorized, http.StatusForbidden, "is not this newAccount URL"},
		{"another key than the outer one", eabJWS{alg: "HS256", kid: good.KID, url: newAcct, payload: otherJWK, macKey: good.HMACKey},
			vocab.ErrorUnauthorized, http.StatusForbidden, "binds another key"},
		{"a nonce", eabJWS{alg: "HS256", kid: good.KID, url: newAcct, nonce: true, macKey: good.HMACKey},
			vocab.ErrorMalformed, http.StatusBadRequest, "must not carry a nonce"},
		{"a jwk beside the kid", eabJWS{alg: "HS256", kid: good.KID, url: newAcct, macKey: good.HMACKey,
			extra: map[string]any{"jwk": json.RawMessage(otherJWK)}},
			vocab.ErrorMalformed, http.StatusBadRequest, "must not carry a jwk"},
		{"a crit extension the server does not understand", eabJWS{alg: "HS256", kid: good.KID, url: newAcct, macKey: good.HMACKey,
			extra: map[string]any{"crit": []string{"exp"}, "exp": 1}},
			vocab.ErrorMalformed, http.StatusBadRequest, "has a crit parameter"},
		{"an unencoded payload (RFC 7797 b64 false)", eabJWS{alg: "HS256", kid: good.KID, url: newAcct, macKey: good.HMACKey,
			extra: map[string]any{"crit": []string{"b64"}, "b64": false}},
			vocab.ErrorMalformed, http.StatusBadRequest, "has a crit parameter"},
		{"HS384 with a 256-bit key", eabJWS{alg: "HS384", kid: good.KID, url: newAcct, macKey: good.HMACKey},
			vocab.ErrorMalformed, http.StatusBadRequest, "needs a MAC key of at least 384 bits"},
		{"HS512 with a 256-bit key", eabJWS{alg: "HS512", kid: good.KID, url: newAcct, macKey: good.HMACKey},
			vocab.ErrorMalformed, http.StatusBadRequest, "needs a MAC key of at least 512 bits"},
		{"a signature algorithm instead of a MAC", eabJWS{alg: "ES256", kid: good.KID, url: newAcct, macKey: good.HMACKey},
			vocab.ErrorMalformed, http.StatusBadRequest, "is not HS256, HS384 or HS512"},
		{"an unknown kid", eabJWS{alg: "HS256", kid: "nope", url: newAcct, macKey: good.HMACKey},
			vocab.ErrorUnauthorized, http.StatusForbidden, "is not known to this profile"},
		{"a revoked key", eabJWS{alg: "HS256", kid: revoked.KID, url: newAcct, macKey: revoked.HMACKey},
			vocab.ErrorUnauthorized, http.StatusForbidden, "binds no new account"},
		{"an expired key", eabJWS{alg: "HS256", kid: expiring.KID, url: newAcct, macKey: expiring.HMACKey},
			vocab.ErrorUnauthorized, http.StatusForbidden, "binds no new account"},
		{"a reused single-use key", eabJWS{alg: "HS256", kid: used.KID, url: newAcct, macKey: used.HMACKey},
			vocab.ErrorUnauthorized, http.StatusForbidden, "binds no new account"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case's refusal is the first of its interval (the rows
			// are spaced: TestRefusedBindingsAreAuditedOncePerAddressAndKeyAnInterval).
			clk.Advance(authority.BindingAuditInterval)
			rc := e.rawClient()
			before := refusals(t, e)
			r := rc.post(newAcct, map[string]any{"termsOfServiceAgreed": true,
				"externalAccountBinding": c.eab.build(t, rc.key.(*ecdsa.PrivateKey))}, jwsOpts{embedJWK: true})
			if r.problem == nil || r.problem.Type != c.typ || r.status != c.status || !strings.Contains(r.problem.Detail, c.detail) {
				t.Fatalf("got %d %s; want %d %s with %q", r.status, r.body, c.status, c.typ, c.detail)
			}
			after := refusals(t, e)
			if len(after) != len(before)+1 || after[0].Reason != c.eab.kid || !strings.Contains(after[0].Detail, c.detail) {
				t.Fatalf("audit rows %+v; want one more refusal naming %s", after, c.eab.kid)
			}
		})
	}
	// The good key, refused above only for what each case broke, still binds.
	rc := e.rawClient()
	r := rc.post(newAcct, map[string]any{"termsOfServiceAgreed": true,
		"externalAccountBinding": eabJWS{alg: "HS256", kid: good.KID, url: newAcct, macKey: good.HMACKey}.build(t, rc.key.(*ecdsa.PrivateKey))},
		jwsOpts{embedJWK: true})
	if r.status != http.StatusCreated {
		t.Fatalf("the good binding: %d %s", r.status, r.body)
	}
}

// Anyone can send a binding: a throwaway account key and a made-up kid
// cost nothing. A flood of refused bindings must not cost a durable audit
// row each: one per client address and key of the profile an interval,
// any kid that names no key counting as one key.
func TestRefusedBindingsAreAuditedOncePerAddressAndKeyAnInterval(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e, clk, _ := eabEnv(t, authority.EABRequired)
		newAcct := e.url("/new-account")
		first, second := mint(t, e, "first", false, 0), mint(t, e, "second", false, 0)
		refuse := func(t *testing.T, b eabJWS) {
			t.Helper()
			rc := e.rawClient()
			r := rc.post(newAcct, map[string]any{"termsOfServiceAgreed": true,
				"externalAccountBinding": b.build(t, rc.key.(*ecdsa.PrivateKey))}, jwsOpts{embedJWK: true})
			if r.status != http.StatusForbidden && r.status != http.StatusBadRequest {
				t.Fatalf("a bad binding was answered %d %s", r.status, r.body)
			}
		}
		unknown := func(i int) eabJWS {
			return eabJWS{alg: "HS256", kid: fmt.Sprintf("made-up-%d", i), url: newAcct, macKey: first.HMACKey}
		}
		wrongMAC := func(k store.EABKey) eabJWS {
			return eabJWS{alg: "HS256", kid: k.KID, url: newAcct, macKey: []byte("not the key")}
		}
		steps := []struct {
			name     string
			send     func(t *testing.T)
			wantRows int // rows after the step
		}{
			{"ok/the first refusal of a made-up kid is audited", func(t *testing.T) { refuse(t, unknown(0)) }, 1},
			{"ok/more made-up kids from the address add no row", func(t *testing.T) {
				for i := 1; i <= 20; i++ {
					refuse(t, unknown(i))
				}
			}, 1},
			{"ok/the first refusal of a known key is audited", func(t *testing.T) { refuse(t, wrongMAC(first)) }, 2},
			{"ok/more refusals of that key add no row", func(t *testing.T) {
				for range 5 {
					refuse(t, wrongMAC(first))
				}
				refuse(t, eabJWS{alg: "HS256", kid: first.KID, url: newAcct, macKey: first.HMACKey, nonce: true})
			}, 2},
			{"ok/another known key has its own row", func(t *testing.T) { refuse(t, wrongMAC(second)) }, 3},
			{"ok/after the interval the refusals are audited again", func(t *testing.T) {
				clk.Advance(authority.BindingAuditInterval)
				refuse(t, unknown(21))
				refuse(t, wrongMAC(first))
				refuse(t, unknown(22))
			}, 5},
		}
		for _, st := range steps {
			t.Run(st.name, func(t *testing.T) {
				st.send(t)
				if got := refusals(t, e); len(got) != st.wantRows {
					t.Fatalf("%d account_binding_refused rows, want %d: %+v", len(got), st.wantRows, got)
				}
			})
		}
		// The key refused above only for its MAC still binds.
		rc := e.rawClient()
		r := rc.post(newAcct, map[string]any{"termsOfServiceAgreed": true,
			"externalAccountBinding": eabJWS{alg: "HS256", kid: first.KID, url: newAcct, macKey: first.HMACKey}.build(t, rc.key.(*ecdsa.PrivateKey))},
			jwsOpts{embedJWK: true})
		if r.status != http.StatusCreated {
			t.Fatalf("the good binding: %d %s", r.status, r.body)
		}
	})
}

func refusals(t *testing.T, e *testEnv) []store.AuditEvent {
	t.Helper()
	evs, err := e.db.SearchAudit(context.Background(), store.AuditFilter{Event: vocab.EventAccountBindingRefused})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestNoMACKeyAppearsInAnyLogLineOrAuditRow(t *testing.T) {
	ctx := context.Background()
	e, _, logs := eabEnv(t, authority.EABRequired)
	k := mint(t, e, "secret-holder", false, 0)
	c := newAccountClient(e)
	if _, err := registerWith(ctx, c, &k); err != nil {
		t.Fatal(err)
	}
	_, err := registerWith(ctx, newAccountClient(e), &k) // refused: used
	wantACMEProblem(t, err, vocab.ErrorUnauthorized, "already used")
	wrong := store.EABKey{KID: k.KID, HMACKey: append([]byte("x"), k.HMACKey...)}
	_, err = registerWith(ctx, newAccountClient(e), &wrong) // refused: wrong MAC
	wantACMEProblem(t, err, vocab.ErrorUnauthorized, "MAC does not verify")

	forms := []string{base64.RawURLEncoding.EncodeToString(k.HMACKey), base64.StdEncoding.EncodeToString(k.HMACKey),
		fmt.Sprintf("%x", k.HMACKey), string(k.HMACKey)}
	if logs.Len() == 0 {
		t.Fatal("no log lines observed")
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()) // as Caddy writes logs
	for _, entry := range logs.All() {
		buf, err := enc.EncodeEntry(entry.Entry, entry.Context)
		if err != nil {
			t.Fatal(err)
		}
		line := buf.String()
		for _, f := range forms {
			if strings.Contains(line, f) {
				t.Errorf("log line %q carries the MAC key", entry.Message)
			}
		}
	}
	rows, err := e.db.SearchAudit(ctx, store.AuditFilter{})
	if err != nil || len(rows) < 3 {
		t.Fatalf("audit rows %d %v; want the minting and the refusals", len(rows), err)
	}
	for _, row := range rows {
		line := fmt.Sprintf("%+v", row)
		for _, f := range forms {
			if strings.Contains(line, f) {
				t.Errorf("audit row %s carries the MAC key", row.Event)
			}
		}
	}
}

// Registrations racing for a single-use key bind one account, on either
// database; the others are refused as a used key's are.
func TestConcurrentRegistrationsWithASingleUseKeyBindOneAccount(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e, _, _ := eabEnv(t, authority.EABRequired)
		k := mint(t, e, "race", false, 0)
		const n = 6
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := registerWith(ctx, newAccountClient(e), &k)
				errs <- err
			}()
		}
		created := 0
		for range n {
			if err := <-errs; err == nil {
				created++
			} else {
				wantACMEProblem(t, err, vocab.ErrorUnauthorized, "binds no new account")
			}
		}
		if created != 1 {
			t.Fatalf("%d accounts registered with one single-use key; want 1", created)
		}
		accts, err := e.db.ListAccounts(ctx, store.AccountFilter{Profile: "test"})
		if err != nil || len(accts) != 1 || accts[0].EABKID != k.KID {
			t.Fatalf("accounts %d %v; want the one bound", len(accts), err)
		}
	})
}

// An EAB key belongs to the profile it was minted for: on the same
// database, another profile's key binds no account here, MAC and all.
func TestAKeyMintedForAnotherProfileBindsNoAccountHere(t *testing.T) {
	ctx := context.Background()
	e, _, _ := eabEnv(t, authority.EABRequired)
	mac := make([]byte, authority.EABMACKeySize)
	rand.Read(mac)
	other := store.EABKey{KID: "other-profiles-key", Profile: "other", Label: "elsewhere", HMACKey: mac, Reusable: true, Created: time.Now()}
	if err := e.db.CreateEABKey(ctx, other); err != nil {
		t.Fatal(err)
	}
	_, err := registerWith(ctx, newAccountClient(e), &other)
	wantACMEProblem(t, err, vocab.ErrorUnauthorized, "is not known to this profile")
}
