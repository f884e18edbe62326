package caddyfile_test

import (
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// readmeCaddyfiles returns the README's code blocks that are Caddyfiles or
// parts of one (those tagged caddyfile, and untagged ones naming
// acme_proxy), each made whole: a handler's block is put in a site, a
// certificate_profile block in a handler.
func readmeCaddyfiles(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var (
		out  []string
		cur  []string
		in   bool
		lang string
	)
	for line := range strings.SplitSeq(string(readme), "\n") {
		if fence, ok := strings.CutPrefix(line, "```"); ok {
			if !in {
				in, lang, cur = true, strings.TrimSpace(fence), nil
				continue
			}
			in = false
			block := strings.Join(cur, "\n") + "\n"
			if lang != "caddyfile" && (lang != "" || !strings.Contains(block, "acme_proxy")) {
				continue
			}
			switch first := strings.TrimSpace(block); {
			case strings.HasPrefix(first, "acme_proxy {"):
				block = "https://ca.example.test {\n" + block + "}\n"
			case strings.HasPrefix(first, "certificate_profile "):
				block = "https://ca.example.test {\nacme_proxy {\nprofile p\n" + block + "}\n}\n"
			}
			out = append(out, block)
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	return out
}

// readmeJSONKey maps the settings whose JSON key is not their Caddyfile
// name to the keys they may become.
var readmeJSONKey = map[string][]string{
	"certificate_profile": {"certificate_profiles"},
	"header":              {"headers"},
	"override":            {"overrides"},
	"database":            {"database", "postgres"}, // database postgres <dsn> is "postgres"
}

// Every Caddyfile the README shows adapts, and every setting it writes in
// an acme_proxy or acme_proxy_ui block is in the JSON it adapts to: an
// operator copies these, and a setting renamed or dropped by the adapter
// would be silently lost. (The DNS provider the README names is not built
// into the tests; the stub provider stands in for it.)
func TestEveryCaddyfileOfTheREADMEAdaptsWithEachOfItsSettings(t *testing.T) {
	blocks := readmeCaddyfiles(t)
	if len(blocks) < 10 {
		t.Fatalf("found %d Caddyfiles in the README; it shows more", len(blocks))
	}
	for _, block := range blocks {
		block = strings.ReplaceAll(block, "dns       cloudflare", "dns       acmeproxytest")
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(block), nil)
		if err != nil {
			t.Errorf("the README's Caddyfile does not adapt: %v\n%s", err, block)
			continue
		}
		js := string(out)
		for _, key := range settings(block) {
			want := readmeJSONKey[key]
			if want == nil {
				want = []string{key}
			}
			found := false
			for _, w := range want {
				found = found || strings.Contains(js, `"`+w+`"`)
			}
			if !found {
				t.Errorf("the README's setting %q is not in the adapted JSON (want one of %q):\n%s", key, want, block)
			}
		}
	}
}

// settings returns the first word of every line inside the acme_proxy and
// acme_proxy_ui blocks of a Caddyfile, comments and zero durations left
// out.
func settings(caddyfile string) []string {
	var (
		keys  []string
		depth int
		in    []int // the depths at which an acme_proxy block opened
	)
	for line := range strings.SplitSeq(caddyfile, "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "}" {
			if len(in) > 0 && in[len(in)-1] == depth {
				in = in[:len(in)-1]
			}
			depth--
			continue
		}
		// A zero duration is what an unset one is (propagation_delay 0s):
		// the JSON leaves it out.
		if len(in) > 0 && !(len(fields) == 2 && fields[1] == "0s") {
			keys = append(keys, fields[0])
		}
		if fields[len(fields)-1] == "{" {
			depth++
			if fields[0] == "acme_proxy" || fields[0] == "acme_proxy_ui" {
				in = append(in, depth)
			}
		}
	}
	return keys
}
