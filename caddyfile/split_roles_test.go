package caddyfile_test

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestTheREADMEsSplitRolesCaddyfilesServeOneProfileWithAndWithoutItsSigner
// adapts the two Caddyfiles of the README's "Splitting roles": the front
// end's profile has the delegate as its signer and nothing else that
// signs, the worker's is the same profile, configured alike, with the
// local CA.
func TestTheREADMEsSplitRolesCaddyfilesServeOneProfileWithAndWithoutItsSigner(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	start := strings.Index(section, "### Splitting roles")
	if start < 0 {
		t.Fatal(`the README has no "### Splitting roles" section`)
	}
	section = section[start:]
	if end := strings.Index(section[3:], "\n### "); end >= 0 {
		section = section[:end+3]
	}
	blocks := regexp.MustCompile("(?s)```caddyfile\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf("the section shows %d Caddyfiles, want the front end's and the worker's", len(blocks))
	}
	handler := func(caddyfile string) map[string]any {
		t.Helper()
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
		if err != nil {
			t.Fatalf("the README's Caddyfile does not adapt: %v\n%s", err, caddyfile)
		}
		var doc any
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatal(err)
		}
		hs := acmeProxyHandlers(doc)
		if len(hs) != 1 {
			t.Fatalf("%d acme_proxy handlers, want 1:\n%s", len(hs), out)
		}
		return hs[0]
	}
	front, worker := handler(blocks[0][1]), handler(blocks[1][1])
	if got := front["signer"]; !reflect.DeepEqual(got, map[string]any{"module": "delegated"}) {
		t.Errorf("the front end's signer is %v, want {module: delegated} alone", got)
	}
	if got, _ := worker["signer"].(map[string]any); got["module"] != "local_ca" {
		t.Errorf("the worker's signer is %v, want local_ca", worker["signer"])
	}
	delete(front, "signer")
	delete(worker, "signer")
	if !reflect.DeepEqual(front, worker) {
		t.Errorf("the two instances configure the profile differently:\nfront end %v\nworker    %v", front, worker)
	}
}
