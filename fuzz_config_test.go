package caddyacmeproxy

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
)

// FuzzProvisionConfig provisions the JSON of the acme_proxy app and of a
// route of http.handlers.acme_proxy handlers (with their signers), as
// `caddy validate` does: decoded into a Caddy config and every module
// provisioned, nothing started. The config around them is fixed and
// sandboxed: storage, the database and every file a signer reads are in a
// temporary directory (a signer's cert, key and trusted_roots keep only
// their base name; intermediate.pem, intermediate.key and
// upstream-roots.pem, the names the fixtures use, exist there), so that
// the fuzzer explores values, not the file system.
//
// For every input:
//
//   - provisioning never panics;
//   - a config that fails, fails in an acme_proxy module (nothing else in
//     the config can fail), with an error that names the key at fault: the
//     message of the acme_proxy module that failed starts with one of its
//     JSON keys, or is the JSON decoder's complaint about a named field;
//   - whether it succeeds or fails, nothing is left open: the app's
//     database is released, as Caddy's cleanup of a failed (or validated)
//     config must leave it. (A failed config may still have created the
//     database file: the app opens it before the handlers are
//     provisioned, and the file is the store's, not a half-written
//     config.)
//   - a config that provisions round-trips: each handler decoded into
//     Handler and marshalled again is stable under a second round, and
//     the re-marshalled config provisions too.
func FuzzProvisionConfig(f *testing.F) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil {
		f.Fatal(err)
	}
	if len(files) == 0 {
		f.Fatal("no adapt fixtures")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		_, want, ok := strings.Cut(string(data), "\n----------\n")
		if !ok {
			f.Fatalf("%s: no expected JSON", file)
		}
		var doc any
		if err := json.Unmarshal([]byte(want), &doc); err != nil {
			f.Fatalf("%s: %v", file, err)
		}
		app := []byte("{}")
		if apps, ok := doc.(map[string]any)["apps"].(map[string]any); ok && apps["acme_proxy"] != nil {
			if app, err = json.Marshal(apps["acme_proxy"]); err != nil {
				f.Fatal(err)
			}
		}
		handlers, err := json.Marshal(acmeProxyHandlerObjects(doc))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(app, handlers)
	}
	for _, seed := range []struct{ app, handlers string }{
		{`{}`, `[{"profile":"a"}]`},
		{`{}`, `[]`},
		{`{"database":"x.db","notify":[{"type":"script","command":"/bin/true"}]}`, `[{"profile":"a"}]`},
		{`{"notify":[{"type":"webhook","url":"/relative"}]}`, `[{"profile":"a"}]`},
		{`{"notify":[{"type":"pager"}]}`, `[{"profile":"a"}]`},
		{`{"notify":{}}`, `[{"profile":"a"}]`},
		{`{"database":7}`, `[{"profile":"a"}]`},
		{`{"databse":"x"}`, `[{"profile":"a"}]`},
		{`{}`, `[{"profile":"a"},{"profile":"a","prefix":"/other"}]`},
		{`{}`, `[{"profile":"Bad Name"}]`},
		{`{}`, `[{}]`},
		{`{}`, `[{"profile":"a","prefix":"acme"}]`},
		{`{}`, `[{"profile":"a","challenges":["http-02"]}]`},
		{`{}`, `[{"profile":"a","challenges":["dns-01","dns-01"]}]`},
		{`{}`, `[{"profile":"a","challenges":"dns-01"}]`},
		{`{}`, `[{"profile":"a","resolvers":["10.0.0.53","[::1]:5353"]}]`},
		{`{}`, `[{"profile":"a","resolvers":["ns.example.com"]}]`},
		{`{}`, `[{"profile":"a","resolvers":["a b"]}]`},
		{`{}`, `[{"profile":"a","validation_ports":{"http":70000}}]`},
		{`{}`, `[{"profile":"a","validation_ports":{"tls":-1}}]`},
		{`{}`, `[{"profile":"a","allow":{"domains":["*.example.com"],"ip_ranges":["10.0.0.0/8","::1"]}}]`},
		{`{}`, `[{"profile":"a","deny":{"domains":["bad..example.com"]}}]`},
		{`{}`, `[{"profile":"a","deny":{"ip_ranges":["10.0.0.0/33"]}}]`},
		{`{}`, `[{"profile":"a","crl_url":"https://ca.example.com/acme/a/crl"}]`},
		{`{}`, `[{"profile":"a","crl_url":"http://ca.example.com/acme/a/crl","signer":{"module":"local_ca","lifetime":"30d"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","lifetime":"30d"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","lifetime":-1}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","lifetime":"soon"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","ca":"nosuch"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","cert":"/nonexistent.pem"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","key":"intermediate.key"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","cert":"intermediate.pem","key":"intermediate.key"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"local_ca","cert":"upstream-roots.pem","key":"intermediate.key"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"vault"}}]`},
		{`{}`, `[{"profile":"a","signer":{}}]`},
		{`{}`, `[{"profile":"a","signer":null}]`},
		{`{}`, `[{"profile":"a","signer":"local_ca"}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"ftp://x"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","challenge":"tls-alpn01"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","challenge":"dns01"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","challenge":"bypass","dns":{"name":"acmeproxytest"}}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","dns":{"name":"nosuch"}}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","propagation_timeout":-2}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","propagation_delay":-1}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","eab":{"key_id":"","mac_key":"x"}}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","eab":{"key_id":"k","mac_key":"not base64!"}}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","trusted_roots":"intermediate.key"}}]`},
		{`{}`, `[{"profile":"a","signer":{"module":"relay","directory":"https://ca.example/dir","trusted_roots":"upstream-roots.pem"}}]`},
		{`{}`, `[{"profile":"a","notify":[{"type":"email","smtp":"m.example.com:25","from":"a@example.com","to":["b@example.com"]}]}]`},
		{`{}`, `[{"profile":"a","notify":[{"type":"email","smtp":"m.example.com","from":"a@example.com","to":["b@example.com"]}]}]`},
		{`{}`, `[{"profile":"a","notify":[{"type":"webhook","url":"{env.NO_SUCH_HOOK}"}]}]`},
		{`{}`, `[{"profile":"a","frobnicate":true}]`},
		{`{}`, `[{"profile":"a","certificate_profiles":{"c":{"lifetime":"1 hour"}}}]`},
	} {
		f.Add([]byte(seed.app), []byte(seed.handlers))
	}

	sb := newProvisionSandbox(f)
	f.Fuzz(func(t *testing.T, appJSON, handlersJSON []byte) {
		var app map[string]json.RawMessage
		var handlers []map[string]json.RawMessage
		if json.Unmarshal(appJSON, &app) != nil || json.Unmarshal(handlersJSON, &handlers) != nil {
			t.Skip("not a JSON object and a JSON list of objects")
		}
		err := sb.validate(t, app, handlers)
		if refs, held := dbPool.References(sb.dbKey(t)); held {
			t.Fatalf("after provisioning (error: %v) the database is still held %d times", err, refs)
		}
		if err != nil {
			if inner, ok := acmeProxyFailure(err.Error()); !ok {
				t.Fatalf("failed outside the acme_proxy modules: %v", err)
			} else if !namesConfigKey(inner) {
				t.Fatalf("the error names no acme_proxy key: %q\n(in %v)", inner, err)
			}
			return
		}
		// A config that provisions round-trips through its module structs.
		normalized := make([]map[string]json.RawMessage, len(handlers))
		for i, h := range handlers {
			once := remarshalHandler(t, h)
			twice := remarshalHandler(t, once)
			a, _ := json.Marshal(once)
			b, _ := json.Marshal(twice)
			if !bytes.Equal(a, b) {
				t.Fatalf("handler %d is not stable through Handler:\nonce:  %s\ntwice: %s", i, a, b)
			}
			normalized[i] = once
		}
		if err := sb.validate(t, app, normalized); err != nil {
			t.Fatalf("the config provisions, but not once its handlers are re-marshalled: %v", err)
		}
	})
}

// provisionSandbox is the fixed part of the configs FuzzProvisionConfig
// provisions.
type provisionSandbox struct {
	dir string
}

func newProvisionSandbox(f *testing.F) *provisionSandbox {
	dir := f.TempDir()
	f.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	f.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	pems := filepath.Join(dir, "pem")
	if err := os.Mkdir(pems, 0o700); err != nil {
		f.Fatal(err)
	}
	ca := issuingCAFiles{cert: filepath.Join(pems, "intermediate.pem"), key: filepath.Join(pems, "intermediate.key")}
	writeIssuingCAFiles(f, ca, "fuzz issuing CA", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	certPEM, err := os.ReadFile(ca.cert)
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pems, "upstream-roots.pem"), certPEM, 0o600); err != nil {
		f.Fatal(err)
	}
	return &provisionSandbox{dir: dir}
}

func (sb *provisionSandbox) dbPath() string { return filepath.Join(sb.dir, "acme_proxy.db") }

// dbKey is the app's key for the database in dbPool.
func (sb *provisionSandbox) dbKey(t *testing.T) string {
	t.Helper()
	key, _, err := (&App{AppConfig: acmeproxy.AppConfig{Database: sb.dbPath()}}).database()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// validate provisions the app and handlers inside the sandbox's config,
// as `caddy validate` does.
func (sb *provisionSandbox) validate(t *testing.T, app map[string]json.RawMessage, handlers []map[string]json.RawMessage) error {
	t.Helper()
	appCfg := map[string]json.RawMessage{}
	for k, v := range app {
		appCfg[k] = v
	}
	appCfg["database"] = jsonString(t, sb.dbPath())
	route := make([]map[string]json.RawMessage, len(handlers))
	for i, h := range handlers {
		route[i] = map[string]json.RawMessage{}
		for k, v := range h {
			route[i][k] = v
		}
		route[i]["handler"] = jsonString(t, "acme_proxy")
		if s, ok := h["signer"]; ok {
			route[i]["signer"] = sb.confineSignerFiles(t, s)
		}
	}
	cfgJSON, err := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"writer": map[string]any{"output": "discard"}}}},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(sb.dir, "storage")},
		"apps": map[string]any{
			"acme_proxy": appCfg,
			"pki":        map[string]any{"certificate_authorities": map[string]any{"local": map[string]any{"install_trust": false}}},
			"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
				"listen":          []string{"127.0.0.1:0"},
				"automatic_https": map[string]any{"disable": true},
				"routes":          []any{map[string]any{"handle": route}},
			}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var cfg *caddy.Config
	if err := caddy.StrictUnmarshalJSON(cfgJSON, &cfg); err != nil {
		t.Fatalf("the sandbox config does not decode: %v", err)
	}
	return caddy.Validate(cfg)
}

// confineSignerFiles keeps only the base name of the files a signer reads,
// in the sandbox's pem directory.
func (sb *provisionSandbox) confineSignerFiles(t *testing.T, raw json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return raw
	}
	for _, k := range []string{"cert", "key", "trusted_roots"} {
		var name string
		if json.Unmarshal(obj[k], &name) == nil && name != "" {
			obj[k] = jsonString(t, filepath.Join(sb.dir, "pem", filepath.Base(name)))
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonString(t *testing.T, s string) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// remarshalHandler decodes a handler's JSON into Handler, with unknown
// fields refused as Caddy refuses them, and marshals it again.
func remarshalHandler(t *testing.T, h map[string]json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var hd Handler
	if err := caddy.StrictUnmarshalJSON(raw, &hd); err != nil {
		t.Fatalf("a handler that provisions does not decode into Handler: %v\n%s", err, raw)
	}
	back, err := json.Marshal(&hd)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(back, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// acmeProxyFailure returns the message of the acme_proxy module that made
// a config fail, from Caddy's chain of wrapped errors
// ("loading http app module: provision http: … provision
// http.handlers.acme_proxy: profile: required").
func acmeProxyFailure(msg string) (string, bool) {
	best, found := -1, ""
	for _, marker := range []string{
		"provision acme_proxy: ", "decoding module config: acme_proxy: ",
		"provision http.handlers.acme_proxy: ", "decoding module config: http.handlers.acme_proxy: ",
	} {
		if i := strings.LastIndex(msg, marker); i > best {
			best, found = i, msg[i+len(marker):]
		}
	}
	return found, best >= 0
}

// configKeys are the JSON keys of the app and the handler, read from
// their structs (and the structs they embed), so that a key added to
// either is one an error may name: a list written out here missed caa,
// eab, limits and the rest as they came.
var configKeys = func() []string {
	var keys []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && ft.Kind() == reflect.Struct {
				walk(ft)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); f.IsExported() && name != "" && name != "-" {
				keys = append(keys, name)
			}
		}
	}
	walk(reflect.TypeFor[App]())
	walk(reflect.TypeFor[Handler]())
	return keys
}()

var jsonFieldError = regexp.MustCompile(`^json: (unknown field "([^"]*)"|cannot unmarshal .+? into Go struct field \w+(?:\.\w+)*\.(\w+) of type)`)

// namesConfigKey reports whether an acme_proxy module's error message
// names the key at fault: it starts with a key ("profile: …",
// "validation_ports.http: …", "notify webhook: url: …", "signer: …"), or
// it is the JSON decoder's complaint about a field it names.
func namesConfigKey(msg string) bool {
	if jsonFieldError.MatchString(msg) {
		return true
	}
	for _, k := range configKeys {
		if rest, ok := strings.CutPrefix(msg, k); ok && (strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, " ")) {
			return true
		}
	}
	return false
}

// acmeProxyHandlerObjects finds every acme_proxy handler object in an
// adapted config, less its "handler" key.
func acmeProxyHandlerObjects(v any) []map[string]any {
	var out []map[string]any
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == "acme_proxy" {
			h := map[string]any{}
			for k, x := range v {
				if k != "handler" {
					h[k] = x
				}
			}
			out = append(out, h)
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			out = append(out, acmeProxyHandlerObjects(v[k])...)
		}
	case []any:
		for _, c := range v {
			out = append(out, acmeProxyHandlerObjects(c)...)
		}
	}
	return out
}
