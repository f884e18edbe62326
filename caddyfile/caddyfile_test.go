package caddyfile_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"

	_ "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of the adapt fixtures")

// fixtureSep separates a fixture's Caddyfile from its expected JSON, as in
// Caddy's own caddytest/integration/caddyfile_adapt fixtures.
const fixtureSep = "----------"

func TestAdaptFixturesProduceTheExpectedJSON(t *testing.T) {
	files, err := filepath.Glob("../testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no fixtures found")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".caddyfiletest"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(data), "\n"+fixtureSep+"\n")
			if !ok {
				t.Fatalf("no %q line", fixtureSep)
			}
			got := adapt(t, input+"\n")
			if *update {
				if err := os.WriteFile(file, []byte(input+"\n"+fixtureSep+"\n"+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if strings.TrimSpace(want) != got {
				t.Errorf("adapted JSON differs\n--- got\n%s\n--- want\n%s", got, strings.TrimSpace(want))
			}
		})
	}
}

// adapt runs the Caddyfile adapter and returns tab-indented JSON.
func adapt(t *testing.T, caddyfile string) string {
	t.Helper()
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("warning: line %d: %s: %s", w.Line, w.Directive, w.Message)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "\t"); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestBadCaddyfilesFailWithAnErrorNamingTheKey(t *testing.T) {
	site := func(block string) string {
		return "https://ca.example.test {\n\tacme_proxy {\n" + block + "\n\t}\n}\n"
	}
	global := func(block string) string {
		return "{\n\tacme_proxy {\n" + block + "\n\t}\n}\n"
	}
	tests := []struct {
		name, caddyfile, want string
	}{
		{"unknown subdirective", site("profile a\nfrobnicate on"), `acme_proxy: unknown subdirective "frobnicate"`},
		{"unknown limit", site("profile a\nlimits {\norders_per_ip 5 1h\n}"), `acme_proxy: limits: unknown limit "orders_per_ip"`},
		{"limit with an argument on the block", site("profile a\nlimits strict"), `acme_proxy: limits: unexpected argument "strict"`},
		{"rate limit without a period", site("profile a\nlimits {\norders_per_account 5\n}"), "acme_proxy: limits.orders_per_account: want <count> <period> or off, got 1 values"},
		{"rate limit with a count that is not a number", site("profile a\nlimits {\naccounts_per_ip many 1h\n}"), `acme_proxy: limits.accounts_per_ip: count "many" is not a positive number`},
		{"rate limit with a zero count", site("profile a\nlimits {\nfailed_validations 0 1h\n}"), `acme_proxy: limits.failed_validations: count "0" is not a positive number (or off)`},
		{"rate limit with a bad period", site("profile a\nlimits {\nduplicate_certificates 5 weekly\n}"), `acme_proxy: limits.duplicate_certificates period: "weekly" is not a duration`},
		{"rate limit with a negative period", site("profile a\nlimits {\norders_per_account 5 -1h\n}"), `acme_proxy: limits.orders_per_account period: "-1h" must be positive`},
		{"rate limit period past a century", site("profile a\nlimits {\naccounts_per_ip 1 2200000h\n}"),
			"acme_proxy: limits.accounts_per_ip: period: 2200000h0m0s is longer than 36500d"},
		{"rate limit faster than one a millisecond", site("profile a\nlimits {\norders_per_account 5000 1s\n}"), "acme_proxy: limits.orders_per_account: period: 5000 per 1s is more than one a millisecond"},
		{"cap with a period", site("profile a\nlimits {\npending_authorizations 100 1h\n}"), "acme_proxy: limits.pending_authorizations: want <count> or off, got 2 values"},
		{"max identifiers over what an order holds", site("profile a\nlimits {\nmax_identifiers 5000\n}"), "acme_proxy: limits.max_identifiers: count: 5000 is over the 1000 identifiers an order can hold"},
		{"limit set twice", site("profile a\nlimits {\nmax_identifiers 5\nmax_identifiers 6\n}"), "acme_proxy: limits.max_identifiers: set twice"},
		{"override with too few values", site("profile a\nlimits {\noverride eab:fleet orders_per_account\n}"), "acme_proxy: limits.override: want <account id | eab:label> <limit> <count> [<period>], got 2 values"},
		{"override of an unknown limit", site("profile a\nlimits {\noverride eab:fleet orders 5\n}"), `acme_proxy: limits.override: unknown limit "orders"`},
		{"override with an empty label", site("profile a\nlimits {\noverride eab: orders_per_account 5\n}"), "acme_proxy: limits.override: eab: wants a label"},
		{"override of accounts_per_ip for an account", site("profile a\nlimits {\noverride acct1 accounts_per_ip 5 1h\n}"), "acme_proxy: limits.overrides[0]: accounts_per_ip counts registrations before an account exists"},
		{"override given twice", site("profile a\nlimits {\noverride eab:x max_identifiers 5\noverride eab:x max_identifiers 6\n}"), "acme_proxy: limits.overrides[1]: eab:x overrides max_identifiers twice"},
		{"missing profile", site("prefix /acme"), "acme_proxy: profile: required"},
		{"eab neither required nor optional", site("profile a\neab always"), `acme_proxy: eab: "always" must be required or optional`},
		{"eab without value", site("profile a\neab"), "acme_proxy: eab: want one value, got 0"},
		{"empty block", "https://ca.example.test {\n\tacme_proxy\n}\n", "acme_proxy: profile: required"},
		{"profile with a space", site(`profile "Bad Name"`), `acme_proxy: profile: "Bad Name" must match [a-z0-9-]+`},
		{"profile in upper case", site("profile Internal"), `acme_proxy: profile: "Internal" must match`},
		{"profile longer than a DNS label", site("profile " + strings.Repeat("p", 64)), "acme_proxy: profile: a name of 64 characters; at most 63"},
		{"profile with two values", site("profile a b"), "acme_proxy: profile: want one value, got 2"},
		{"prefix without value", site("profile a\nprefix"), "acme_proxy: prefix: want one value, got 0"},
		{"http port not a number", site("profile a\nvalidation_ports {\nhttp abc\n}"), `acme_proxy: validation_ports.http: "abc" is not a port`},
		{"tls port zero", site("profile a\nvalidation_ports {\ntls 0\n}"), `acme_proxy: validation_ports.tls: "0" is not a port`},
		{"tls port too high", site("profile a\nvalidation_ports {\ntls 65536\n}"), `acme_proxy: validation_ports.tls: "65536" is not a port`},
		{"unknown validation port", site("profile a\nvalidation_ports {\ndns 53\n}"), `acme_proxy: validation_ports: unknown setting "dns"`},
		{"bad lifetime", site("profile a\nsigner local_ca {\nlifetime soon\n}"), `acme_proxy: signer.lifetime: "soon" is not a duration`},
		{"lifetime in days spelled out", site("profile a\nsigner local_ca {\nlifetime 7days\n}"),
			`acme_proxy: signer.lifetime: "7days" is not a duration: want a number and a unit (ms, s, m, h or d), such as 90s, 12h or 7d`},
		{"negative lifetime", site("profile a\nsigner local_ca {\nlifetime -1h\n}"), `acme_proxy: signer.lifetime: "-1h" must be positive`},
		{"unknown signer", site("profile a\nsigner vault"), `acme_proxy: signer: unknown signer "vault"`},
		{"signer without name", site("profile a\nsigner"), "acme_proxy: signer: want one value, got 0"},
		{"signer with an argument after its name", site("profile a\nsigner local_ca pki"), "acme_proxy: signer: want one value, got 2"},
		{"relay signer with an argument after its name", site("profile a\nsigner relay https://ca.example/dir"), "acme_proxy: signer: want one value, got 2"},
		{"unknown local_ca setting", site("profile a\nsigner local_ca {\nissuer x\n}"), `acme_proxy: signer local_ca: unknown setting "issuer"`},
		{"resolver by host name", site("profile a\nresolvers 10.0.0.53 ns.example.com"), `acme_proxy: resolvers: "ns.example.com": want an IP address`},
		{"resolver by host name and port", site("profile a\nresolvers ns.example.com:53"), `acme_proxy: resolvers: "ns.example.com:53": "ns.example.com" is not an IP address`},
		{"resolver without a host", site("profile a\nresolvers :53"), `acme_proxy: resolvers: ":53": "" is not an IP address`},
		{"resolver with a port above 65535", site("profile a\nresolvers a:99999"), `acme_proxy: resolvers: "a:99999": "a" is not an IP address`},
		{"resolver on a second line", site("profile a\nresolvers 10.0.0.53\nresolvers [2001:db8::53]:53 10.0.0.53:99999"), `acme_proxy: resolvers: "10.0.0.53:99999": "99999" is not a port number`},
		{"challenges without values", site("profile a\nchallenges"), "acme_proxy: challenges: want at least one value"},
		{"unknown allow setting", site("profile a\nallow {\nemails a@b\n}"), `acme_proxy: allow: unknown setting "emails"`},
		{"deny domains without values", site("profile a\ndeny {\ndomains\n}"), "acme_proxy: deny.domains: want at least one value"},
		{"too many args on the directive", "https://ca.example.test {\n\tacme_proxy internal {\n\t\tprofile a\n\t}\n}\n", `acme_proxy: unexpected argument "internal"`},
		{"unknown global setting", "{\n\tacme_proxy {\n\t\tdsn x\n\t}\n}\n", `acme_proxy: unknown global option setting "dsn"`},
		{"global database without value", "{\n\tacme_proxy {\n\t\tdatabase\n\t}\n}\n", "acme_proxy: database: want <path>, sqlite <path> or postgres <dsn>, got 0 values"},
		{"global database postgres without a DSN", "{\n\tacme_proxy {\n\t\tdatabase postgres\n\t}\n}\n", "acme_proxy: database postgres: want a DSN"},
		{"global database of an unknown kind", "{\n\tacme_proxy {\n\t\tdatabase mysql tcp://db\n\t}\n}\n", `acme_proxy: database: unknown database "mysql"; want sqlite or postgres`},
		{"global database with three values", "{\n\tacme_proxy {\n\t\tdatabase postgres a b\n\t}\n}\n", "acme_proxy: database: want <path>, sqlite <path> or postgres <dsn>, got 3 values"},
		{"audit retention without value", "{\n\tacme_proxy {\n\t\taudit_retention\n\t}\n}\n", "acme_proxy: audit_retention: want one value, got 0"},
		{"audit retention not a duration", "{\n\tacme_proxy {\n\t\taudit_retention forever\n\t}\n}\n", `acme_proxy: audit_retention: "forever" is not a duration or "keep"`},
		{"audit retention of zero", "{\n\tacme_proxy {\n\t\taudit_retention 0s\n\t}\n}\n", `acme_proxy: audit_retention: "0s" must be positive`},
		{"order retention without value", "{\n\tacme_proxy {\n\t\torder_retention\n\t}\n}\n", "acme_proxy: order_retention: want one value, got 0"},
		{"order retention not a duration", "{\n\tacme_proxy {\n\t\torder_retention a-month\n\t}\n}\n", `acme_proxy: order_retention: "a-month" is not a duration or "keep"`},
		{"certificate retention of zero", "{\n\tacme_proxy {\n\t\tcertificate_retention 0d\n\t}\n}\n", `acme_proxy: certificate_retention: "0d" must be positive`},
		{"certificate retention with two values", "{\n\tacme_proxy {\n\t\tcertificate_retention 90d 30d\n\t}\n}\n", "acme_proxy: certificate_retention: want one value, got 2"},
		{"global option with an argument", "{\n\tacme_proxy x\n}\n", `acme_proxy: unexpected argument "x"`},
		{"notify without a type", "{\n\tacme_proxy {\n\t\tnotify\n\t}\n}\n", "acme_proxy: notify: want webhook, email or script"},
		{"notify of an unknown type", "{\n\tacme_proxy {\n\t\tnotify pager x\n\t}\n}\n", `acme_proxy: notify: unknown destination "pager"`},
		{"notify webhook without a URL", "{\n\tacme_proxy {\n\t\tnotify webhook\n\t}\n}\n", "acme_proxy: notify webhook: want one URL, got 0 values"},
		{"notify webhook to a relative URL", "{\n\tacme_proxy {\n\t\tnotify webhook /hook\n\t}\n}\n", "acme_proxy: notify webhook: url: must be an absolute"},
		{"notify of an unknown event", site("profile a\nnotify webhook https://h.example.com {\nevents cert_issued\n}"), `notify webhook: events: unknown event "cert_issued"`},
		{"notify webhook with an email setting", site("profile a\nnotify webhook https://h.example.com {\nsmtp x:25\n}"), `acme_proxy: notify webhook: unknown setting "smtp"`},
		{"notify email without recipients", "{\n\tacme_proxy {\n\t\tnotify email {\n\t\t\tsmtp m.example.com:25\n\t\t\tfrom a@example.com\n\t\t}\n\t}\n}\n", "notify email: to: at least one address required"},
		{"notify email with a helo that is no name", "{\n\tacme_proxy {\n\t\tnotify email {\n\t\t\tsmtp m.example.com:25\n\t\t\tfrom a@example.com\n\t\t\tto b@example.com\n\t\t\thelo my_host\n\t\t}\n\t}\n}\n",
			`acme_proxy: notify email: helo: "my_host" is not a domain name or an address literal`},
		{"notify email helo given twice", "{\n\tacme_proxy {\n\t\tnotify email {\n\t\t\thelo a.example.com\n\t\t\thelo b.example.com\n\t\t}\n\t}\n}\n",
			"acme_proxy: notify email helo: given twice"},
		{"notify email with a bad tls", "{\n\tacme_proxy {\n\t\tnotify email {\n\t\t\tsmtp m.example.com:25\n\t\t\ttls ssl\n\t\t}\n\t}\n}\n", `notify email: tls: "ssl" must be`},
		{"certificate profile with an unknown EKU", site("profile a\ncertificate_profile c {\next_key_usage code_signing\n}"),
			`acme_proxy: certificate_profile.c.ext_key_usage: unknown extended key usage "code_signing"`},
		{"certificate profile with a bad key type", site("profile a\ncertificate_profile c {\nkey_types ec256 p521\n}"),
			`acme_proxy: certificate_profile.c.key_types: unknown key type "p521"`},
		{"certificate profile with a bad lifetime", site("profile a\ncertificate_profile c {\nlifetime soon\n}"),
			`acme_proxy: certificate_profile.c.lifetime: "soon" is not a duration`},
		{"certificate profile with max_identifiers zero", site("profile a\ncertificate_profile c {\nmax_identifiers 0\n}"),
			`acme_proxy: certificate_profile.c.max_identifiers: "0" is not a positive number`},
		{"certificate profile with common_name maybe", site("profile a\ncertificate_profile c {\ncommon_name maybe\n}"),
			`acme_proxy: certificate_profile.c.common_name: want on or off, not "maybe"`},
		{"certificate profile with two upstream profiles", site("profile a\ncertificate_profile c {\nupstream_profile short lived\n}"),
			`acme_proxy: certificate_profile.c.upstream_profile: want one value, got 2`},
		{"certificate profile with an unknown setting", site("profile a\ncertificate_profile c {\neku client_auth\n}"),
			`acme_proxy: certificate_profile c: unknown setting "eku"`},
		{"certificate profile defined twice", site("profile a\ncertificate_profile c\ncertificate_profile c"),
			`acme_proxy: certificate_profile c: defined twice`},
		{"renewal_info with a point past the life", site("profile a\nrenewal_info {\npoint 1.5\n}"),
			`acme_proxy: renewal_info.point: "1.5" is not a fraction above 0 and below 1`},
		{"renewal_info with a point that is no number", site("profile a\nrenewal_info {\npoint late\n}"),
			`acme_proxy: renewal_info.point: "late" is not a fraction`},
		{"renewal_info with a point that is NaN", site("profile a\nrenewal_info {\npoint NaN\n}"),
			`acme_proxy: renewal_info.point: "NaN" is not a fraction above 0 and below 1`},
		{"renewal_info with a point that is infinite", site("profile a\nrenewal_info {\npoint -Inf\n}"),
			`acme_proxy: renewal_info.point: "-Inf" is not a fraction above 0 and below 1`},
		{"renewal_info with a retry_after under a minute", site("profile a\nrenewal_info {\nretry_after 1ms\n}"),
			`acme_proxy: renewal_info.retry_after: 1ms is outside 1m0s to 24h0m0s`},
		{"renewal_info with a retry_after of a century", site("profile a\nrenewal_info {\nretry_after 36500d\n}"),
			`acme_proxy: renewal_info.retry_after: 876000h0m0s is outside 1m0s to 24h0m0s`},
		{"renewal_info with a negative retry_after", site("profile a\nrenewal_info {\nretry_after -1h\n}"),
			`acme_proxy: renewal_info.retry_after: "-1h" must be positive`},
		{"renewal_info with an unknown setting", site("profile a\nrenewal_info {\nwindow 1h\n}"),
			`acme_proxy: renewal_info: unknown setting "window"`},
		{"renewal_info given twice", site("profile a\nrenewal_info {\npoint 0.5\n}\nrenewal_info {\npoint 0.6\n}"),
			`acme_proxy: renewal_info: given twice`},
		{"default certificate profile naming an unknown one", site("profile a\ncertificate_profile c\ndefault_certificate_profile d"),
			`acme_proxy: default_certificate_profile: "d" is not a certificate_profile of this block`},
		{"notify script without a path", "{\n\tacme_proxy {\n\t\tnotify script\n\t}\n}\n", "acme_proxy: notify script: want a path"},
		{"notify script by a relative path", "{\n\tacme_proxy {\n\t\tnotify script bin/acme-notify\n\t}\n}\n", `acme_proxy: notify script: command: "bin/acme-notify" must be an absolute path`},
		{"profile given twice", site("profile a\nprofile b"), "acme_proxy: profile: given twice"},
		{"prefix given twice", site("profile a\nprefix /a\nprefix /b"), "acme_proxy: prefix: given twice"},
		{"signer given twice", site("profile a\nsigner local_ca\nsigner local_ca {\nlifetime 1d\n}"), "acme_proxy: signer: given twice"},
		{"crl_url given twice", site("profile a\ncrl_url http://a.example/crl\ncrl_url http://b.example/crl"), "acme_proxy: crl_url: given twice"},
		{"eab given twice", site("profile a\neab required\neab optional"), "acme_proxy: eab: given twice"},
		{"terms_of_service given twice", site("profile a\nterms_of_service https://a.example/t1\nterms_of_service https://a.example/t2"), "acme_proxy: terms_of_service: given twice"},
		{"website without value", site("profile a\nwebsite"), "acme_proxy: website: want one value, got 0"},
		{"default certificate profile given twice", site("profile a\ncertificate_profile c\ncertificate_profile d\ndefault_certificate_profile c\ndefault_certificate_profile d"),
			"acme_proxy: default_certificate_profile: given twice"},
		{"http validation port given twice in a block", site("profile a\nvalidation_ports {\nhttp 81\nhttp 82\n}"), "acme_proxy: validation_ports.http: given twice"},
		{"tls validation port given twice in two blocks", site("profile a\nvalidation_ports {\ntls 8443\n}\nvalidation_ports {\ntls 9443\n}"),
			"acme_proxy: validation_ports.tls: given twice"},
		{"local_ca lifetime given twice", site("profile a\nsigner local_ca {\nlifetime 1d\nlifetime 2d\n}"), "acme_proxy: signer.lifetime: given twice"},
		{"local_ca ca given twice", site("profile a\nsigner local_ca {\nca local\nca other\n}"), "acme_proxy: signer.ca: given twice"},
		{"caa account_uri_prefix given twice", site("profile a\ncaa {\nidentities ca.example.test\naccount_uri_prefix https://a.example/acct/\naccount_uri_prefix https://b.example/acct/\n}"),
			"acme_proxy: caa.account_uri_prefix: given twice"},
		{"certificate profile lifetime given twice", site("profile a\ncertificate_profile c {\nlifetime 1d\nlifetime 2d\n}"),
			"acme_proxy: certificate_profile.c.lifetime: given twice"},
		{"renewal_info point given twice", site("profile a\nrenewal_info {\npoint 0.5\npoint 0.6\n}"), "acme_proxy: renewal_info.point: given twice"},
		{"notify webhook secret given twice", site("profile a\nnotify webhook https://h.example.com {\nsecret a\nsecret b\n}"),
			"acme_proxy: notify webhook secret: given twice"},
		{"notify webhook header given twice", site("profile a\nnotify webhook https://h.example.com {\nheader X-A b\nheader X-A c\n}"),
			"acme_proxy: notify webhook header: X-A is given twice"},
		{"notify email smtp given twice", "{\n\tacme_proxy {\n\t\tnotify email {\n\t\t\tsmtp a.example.com:25\n\t\t\tsmtp b.example.com:25\n\t\t}\n\t}\n}\n",
			"acme_proxy: notify email smtp: given twice"},
		{"database given twice in the global option", global("database /var/lib/a.db\ndatabase postgres postgres://db.example/acme"), "acme_proxy: database: given twice"},
		{"audit_retention given twice in the global option", global("audit_retention 30d\naudit_retention keep"), "acme_proxy: audit_retention: given twice"},
		{"order_retention given twice in the global option", global("order_retention 30d\norder_retention 60d"), "acme_proxy: order_retention: given twice"},
		{"certificate_retention given twice in the global option", global("certificate_retention 90d\ncertificate_retention keep"), "acme_proxy: certificate_retention: given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tt.caddyfile), nil)
			if err == nil {
				t.Fatalf("adapted without error; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

// A setting that holds a placeholder ({env.CA_HOST}) is checked at
// provision, once it is replaced, not at adapt, where a CAA name or a
// script's path made of one is not yet what it will be.
func TestSettingsMadeOfPlaceholdersAdaptForProvisionToCheck(t *testing.T) {
	tests := []struct {
		name, caddyfile, want string
	}{
		{"caa identity and account_uri_prefix",
			"https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tcaa {\n\t\t\tidentities {env.CA_HOST}\n\t\t\taccount_uri_prefix https://{env.CA_HOST}/acme/a/account/\n\t\t}\n\t}\n}\n",
			`"account_uri_prefix": "https://{env.CA_HOST}/acme/a/account/"`},
		{"notify script path",
			"{\n\tacme_proxy {\n\t\tnotify script {env.NOTIFY_DIR}/acme-notify {env.NOTIFY_TOKEN}\n\t}\n}\n",
			`"command": "{env.NOTIFY_DIR}/acme-notify"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := adapt(t, tt.caddyfile); !strings.Contains(got, tt.want) {
				t.Errorf("adapted to\n%s\nwhich does not contain %s", got, tt.want)
			}
		})
	}
}
