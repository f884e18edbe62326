package caddyfile_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	caddyacmeproxy "github.com/acmeproxy/caddy-acme-proxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
)

// unknownMatcher is Caddy's error for a named matcher of an unknown
// module. With several, httpcaddyfile's parseMatcherDefinitions meets
// them in a map's order, so which one it names varies from run to run.
var unknownMatcher = regexp.MustCompile(`getting matcher module '[^']*': module not registered: http\.matchers\.\S*`)

// sameError is err's text as two adaptations of one input must agree on
// it: less the name of an unknown matcher, which Caddy picks at random.
func sameError(err error) string {
	if err == nil {
		return ""
	}
	return unknownMatcher.ReplaceAllString(err.Error(), "getting matcher module …")
}

// FuzzAdaptCaddyfile feeds Caddyfile text to the Caddyfile adapter — what
// `caddy adapt` and `caddy run --config Caddyfile` do — and checks what
// holds for every input, not only for the fixtures:
//
//   - adapting never panics, and is a function of its input: the same
//     text adapts twice to the same bytes (or the same error, but for
//     the unknown matcher Caddy's own parser names at random, see
//     sameError), so a config kept under version control adapts to a
//     stable JSON;
//   - what adapts is a config Caddy can decode: the whole document
//     decodes strictly into caddy.Config, as caddy.Load decodes it first;
//   - every acme_proxy object in it is exactly the JSON of its module:
//     the app, each http.handlers.acme_proxy handler and its signer decode
//     with unknown fields refused into the module structs (App, Handler,
//     the signer module it names) and marshal back to the same JSON, so the adapter
//     writes no key the module ignores or spells differently, and nothing
//     it writes is lost or reshaped when Caddy reads it;
//   - the checks the adapter does so that a typo fails at adapt time are
//     at least as strict as Provision's: an adapted handler's profile
//     name, validation ports, resolvers and literal notify destinations
//     (those without placeholders, which the adapter checks; placeholders
//     are only known at provision) pass acmeproxy.ProfileConfig.Validate,
//     and
//     the app's literal destinations pass notify.Destination.Validate.
//
// It does not provision the adapted config: a fuzzed Caddyfile may name
// storage, log files and listeners anywhere, and provisioning would
// create them. FuzzProvisionConfig in the root package provisions the
// acme_proxy JSON inside a sandboxed config, seeded with the fixtures'
// adapted JSON.
func FuzzAdaptCaddyfile(f *testing.F) {
	for _, pattern := range []string{"../testdata/caddyfile_adapt/*.caddyfiletest", "../examples/*.Caddyfile"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		if len(files) == 0 {
			f.Fatalf("no seed files match %s", pattern)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			input, _, _ := strings.Cut(string(data), "\n"+fixtureSep+"\n")
			f.Add(input + "\n")
		}
	}
	site := func(block string) string {
		return "https://ca.example.test {\n\tacme_proxy {\n" + block + "\n\t}\n}\n"
	}
	for _, block := range []string{
		"profile a",
		"profile a\nprefix /",
		"profile a\nprefix acme",
		"profile Internal",
		"profile a-b-0\nchallenges http-01 http-01",
		"profile a\nvalidation_ports {\nhttp 1\ntls 65535\n}",
		"profile a\nvalidation_ports {\nhttp 0\n}",
		"profile a\nvalidation_ports {\ntls 65536\n}",
		"profile a\nvalidation_ports",
		"profile a\nallow {\ndomains *.example.com\n}\nallow {\nip_ranges ::1/128\n}",
		"profile a\ndeny",
		"profile a\ncrl_url http://crl.example.test/crl",
		"profile a\neab required",
		"profile a\neab sometimes",
		"profile a\ncaa {\nidentities ca.example ca2.example\naccount_uri_prefix https://ca.example/acme/a/account/\n}\ncaa {\nidentities ca3.example\n}",
		"profile a\ncaa {\nidentities -bad.example\naccount_uri_prefix ca.example/account\n}",
		"profile a\nresolvers 10.0.0.53 [2001:db8::53]:53\nresolvers 2001:db8::1",
		"profile a\nresolvers ns.example.com:53",
		"profile a\nsigner local_ca",
		"profile a\nsigner local_ca {\nlifetime 1d\n}",
		"profile a\nsigner local_ca {\nlifetime 0s\n}",
		"profile a\nsigner relay {\ndirectory https://ca.example/dir\npropagation_timeout -1\n}",
		"profile a\nsigner relay {\ndirectory https://ca.example/dir\ndns acmeproxytest zone-a\n}",
		"profile a\nsigner relay {\ndirectory {env.UPSTREAM}\neab {env.KID} {env.HMAC}\n}",
		"profile a\nsigner script {\ncommand /usr/local/bin/sign-cert --flag \"two words\"\ntimeout 30s\nenv CA_DIR /srv/ca\nenv PIN {env.PIN}\nrevoke off\n}",
		"profile a\nsigner script {\ncommand sign-cert\ncommand /bin/true\nenv A 1\nenv A 2\n}",
		"profile a\nsigner script",
		"profile a\nnotify webhook /relative",
		"profile a\nnotify webhook {env.HOOK_URL}",
		"profile a\nnotify webhook https://h.example.com {\nheader X-A b\nheader X-A c\n}",
		"profile a\nnotify webhook https://h.example.com {\nheader \"Bad Name\" v\n}",
		"profile a\nnotify email {\nsmtp m.example.com:25\nfrom a@example.com\nto b@example.com\nusername u\n}",
		"profile a\nnotify script /bin/true -v {\nevents certificate_issued\n}",
		"profile a\nlimits {\norders_per_account 5 1h\nmax_identifiers off\noverride eab:x orders_per_account 9\n}",
		"profile a\nlimits {\npending_authorizations 0\nfailed_validations 1 1ms\noverride a accounts_per_ip off\n}",
	} {
		f.Add(site(block))
	}
	f.Add("{\n\tacme_proxy\n}\n")
	f.Add("{\n\tacme_proxy {\n\t\tdatabase /tmp/a.db\n\t}\n\tacme_proxy {\n\t\tnotify script /bin/true\n\t}\n}\n")
	f.Add("{\n\tacme_proxy {\n\t\tnotify email {\n\t\t\tsmtp {env.SMTP}\n\t\t}\n\t}\n}\n")
	f.Add("http://ca.example.test {\n\tacme_proxy /acme/* {\n\t\tprofile a\n\t}\n\troute {\n\t\tacme_proxy {\n\t\t\tprofile b\n\t\t}\n\t}\n}\n")
	f.Add("http://ca.example.test {\n\t@acme path /acme/*\n\tacme_proxy @acme {\n\t\tprofile a\n\t}\n\thandle /x {\n\t\tacme_proxy {\n\t\t\tprofile b\n\t\t}\n\t}\n}\n")

	adapter := caddyconfig.GetAdapter("caddyfile")
	f.Fuzz(func(t *testing.T, input string) {
		// import reads files (a glob, /dev/zero) from the machine
		// running the fuzzer; it is Caddy's, not this adapter's.
		if strings.Contains(input, "import") {
			t.Skip("import reads the file system")
		}
		out, _, err := adapter.Adapt([]byte(input), nil)
		again, _, errAgain := adapter.Adapt([]byte(input), nil)
		if sameError(err) != sameError(errAgain) || !bytes.Equal(out, again) {
			t.Fatalf("adapting twice differs:\nfirst:  %s (err %v)\nsecond: %s (err %v)", out, err, again, errAgain)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("adapting failed with an empty error message")
			}
			return
		}
		var cfg *caddy.Config
		if err := caddy.StrictUnmarshalJSON(out, &cfg); err != nil {
			t.Fatalf("the adapted JSON does not decode as a Caddy config: %v\n%s", err, out)
		}
		var doc any
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatal(err)
		}
		if app, ok := dig(doc, "apps", "acme_proxy"); ok {
			var a caddyacmeproxy.App
			roundTrip(t, "the acme_proxy app", app, "", &a)
			checkLiteralDestinations(t, "the acme_proxy app", a.Notify)
		}
		for _, h := range acmeProxyHandlers(doc) {
			var hd caddyacmeproxy.Handler
			roundTrip(t, "an acme_proxy handler", h, "handler", &hd)
			if s, ok := h["signer"]; ok {
				// Whichever signer module it names, registered wherever.
				obj, _ := s.(map[string]any)
				name, _ := obj["module"].(string)
				if mod, err := caddy.GetModule("acme_proxy.signers." + name); err != nil {
					t.Errorf("an acme_proxy handler has a signer of no known module: %v", s)
				} else {
					roundTrip(t, "a "+name+" signer", obj, "module", mod.New())
				}
			}
			// The rules the adapter checks itself, applied as Provision
			// applies them.
			checked := acmeproxy.ProfileConfig{Profile: hd.Profile, ValidationPorts: hd.ValidationPorts,
				Resolvers: hd.Resolvers, Notify: literal(hd.Notify)}
			checked.SetDefaults()
			if err := checked.Validate(); err != nil {
				t.Errorf("the adapter accepted a handler that Provision refuses: %v\n%s", err, out)
			}
		}
	})
}

// roundTrip decodes obj, less its module-name key, strictly into v, and
// requires that v marshals back to the same JSON.
func roundTrip(t *testing.T, what string, obj any, nameKey string, v any) {
	t.Helper()
	m, ok := obj.(map[string]any)
	if !ok {
		t.Errorf("%s is not a JSON object: %v", what, obj)
		return
	}
	m = mapsWithout(m, nameKey)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Errorf("%s does not decode into %T: %v\n%s", what, v, err, raw)
		return
	}
	back, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: marshalling %T: %v", what, v, err)
	}
	var got any
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, any(m)) {
		t.Errorf("%s does not survive decoding into %T:\nadapted: %s\nmodule:  %s", what, v, raw, back)
	}
}

func mapsWithout(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// literal returns the destinations the adapter checks: those without a
// placeholder in their URL or SMTP server.
func literal(ds []notify.Destination) []notify.Destination {
	var out []notify.Destination
	for _, d := range ds {
		if !strings.Contains(d.URL+d.SMTP, "{") {
			out = append(out, d)
		}
	}
	return out
}

func checkLiteralDestinations(t *testing.T, what string, ds []notify.Destination) {
	t.Helper()
	for _, d := range literal(ds) {
		if err := d.Validate(); err != nil {
			t.Errorf("the adapter accepted a destination of %s that Provision refuses: %v", what, err)
		}
	}
}

// dig follows keys through nested JSON objects.
func dig(v any, keys ...string) (any, bool) {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// acmeProxyHandlers finds every object whose "handler" is acme_proxy,
// wherever it sits (in subroutes, in nested routes).
func acmeProxyHandlers(v any) []map[string]any {
	var out []map[string]any
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == "acme_proxy" {
			out = append(out, v)
		}
		for _, c := range v {
			out = append(out, acmeProxyHandlers(c)...)
		}
	case []any:
		for _, c := range v {
			out = append(out, acmeProxyHandlers(c)...)
		}
	}
	return out
}
