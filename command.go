package caddyacmeproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "acme-proxy",
		Usage: "<profiles|orders|revoke|accounts|jobs|audit|crl|eab|renew-early|migrate-store> [args] [--address <admin>] [--json]",
		Short: "Operates the acme_proxy app through Caddy's admin API",
		Long: `
Reads and changes what the acme_proxy app keeps: its profiles, orders,
accounts, durable jobs, audit trail and CRLs. Every subcommand talks to a
running Caddy over its admin API (routes under /acme_proxy/), found as the
other caddy commands find it: --address, else the admin address of the
--config file, else ` + "localhost:2019" + `.

Output is a table for people; --json prints the admin API's JSON.
migrate-store is the exception: it runs offline, on the database files.

  caddy acme-proxy profiles
  caddy acme-proxy orders [--profile P] [--status S] [--identifier NAME] [--account ID] [--serial HEX] [--since T|AGE] [--after ID] [--limit N]
  caddy acme-proxy orders show <order-id>
  caddy acme-proxy revoke <order-id> [--reason N]
  caddy acme-proxy accounts [--profile P] [--status S] [--after ID] [--limit N]
  caddy acme-proxy accounts show|deactivate <account-id>
  caddy acme-proxy jobs [--kind K] [--status S] [--key K] [--abandon_owed true] [--before ID] [--limit N]
  caddy acme-proxy jobs show|retry|cancel <job-id>
  caddy acme-proxy audit [--profile P] [--event E] [--outcome O] [--order ID] [--account ID] [--serial HEX] [--since T|AGE] [--until T|AGE] [--before ID] [--limit N]
  caddy acme-proxy audit prune --before <RFC 3339 time | age such as 90d>
  caddy acme-proxy crl show|regenerate <profile>
  caddy acme-proxy eab create --profile P --label L [--reusable] [--expires 7d]
  caddy acme-proxy eab list --profile P [--after KID] [--limit N]
  caddy acme-proxy eab revoke [--] <kid>   (-- before an older key id that begins with "-")
  caddy acme-proxy renew-early [--profile P] [--serial HEX]... [--order ID]... [--identifier PATTERN] [--account ID] [--issuer KEYID] [--explanation-url URL]
  caddy acme-proxy migrate-store --from <sqlite file> --to <postgres dsn>

Revocation reasons are RFC 5280 CRLReason codes: 0 unspecified,
1 keyCompromise, 3 affiliationChanged, 4 superseded, 5 cessationOfOperation,
9 privilegeWithdrawn. Revoking an already revoked certificate with
--reason 1 changes its reason to keyCompromise.`,
		CobraFunc: func(cmd *cobra.Command) { configureCLI(cmd, os.Stdout) },
	})
}

// configureCLI adds the subcommands of `caddy acme-proxy` to cmd, writing
// their output to out.
// refuseUnknownSubcommands makes a command that only groups others fail
// on a word that is none of them — cobra prints such a command's help and
// succeeds, so that a mistyped subcommand in a script went unnoticed — and
// print its help when given nothing.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
}

func configureCLI(cmd *cobra.Command, out io.Writer) {
	pf := cmd.PersistentFlags()
	pf.String("address", "", "Address of Caddy's admin API (if --config is not used)")
	pf.StringP("config", "c", "", "Configuration file to read the admin address from (if --address is not used)")
	pf.StringP("adapter", "a", "", "Name of the config adapter to apply (if --config is used)")
	pf.Bool("json", false, "Print the admin API's JSON instead of a table")
	cmd.SilenceUsage = true
	refuseUnknownSubcommands(cmd)

	c := &cli{out: out}
	add := func(parent *cobra.Command, use, short string, args cobra.PositionalArgs, flags func(*cobra.Command), run func(*cobra.Command, []string) error) *cobra.Command {
		sub := &cobra.Command{Use: use, Short: short, Args: args, RunE: run, SilenceUsage: true}
		if flags != nil {
			flags(sub)
		}
		parent.AddCommand(sub)
		return sub
	}
	// oneID takes a command's one positional argument, a resource's id
	// (what) that goes into the admin API's path: an empty one would name
	// the list route instead, and "/", "?", "#" or "%" another route.
	oneID := func(what string) cobra.PositionalArgs {
		return func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("want one %s, got %d arguments", what, len(args))
			}
			if id := args[0]; strings.TrimSpace(id) == "" || strings.ContainsAny(id, "/?#% \t\r\n") {
				return fmt.Errorf("%q is not a valid %s", id, what)
			}
			return nil
		}
	}
	// listFlags adds a list's flags, named as the admin API's parameters
	// (names), each with its help; help holds what differs by list.
	listFlags := func(help map[string]string, names ...string) func(*cobra.Command) {
		common := map[string]string{
			"profile":      "only this profile's",
			"identifier":   "only orders with this identifier (a DNS name or an IP address)",
			"account":      "only this account's",
			"order":        "only this order's",
			"serial":       "only this certificate serial, in hex (any case, colons or not)",
			"since":        "only at or after this: an RFC 3339 time (2026-01-01T00:00:00Z) or an age (1h, 7d)",
			"until":        "only before this: an RFC 3339 time (2026-01-01T00:00:00Z) or an age (1h, 7d)",
			"after":        "the next page: the id a page's last line names (more: --after …)",
			"before":       "the next page: the id a page's last line names (more: --before …)",
			"limit":        "rows a page, 1 to 1000 (default 100)",
			"kind":         "only jobs of this kind (relay_issue, signer_revoke, crl_regenerate, notify_deliver, …)",
			"key":          "only jobs with this key (the order, certificate or CA a job works for)",
			"abandon_owed": "true: only cancelled jobs whose giving up is still owed to a runner of their kind",
			"event":        "only this event (certificate_issued, certificate_revoked, …; the README lists them)",
			"outcome":      "only this outcome: success, failure, refused or interrupted",
		}
		return func(sc *cobra.Command) {
			for _, n := range names {
				h, ok := help[n]
				if !ok {
					h = common[n]
				}
				sc.Flags().String(n, "", h)
			}
		}
	}

	add(cmd, "profiles", "Lists the mounted profiles", cobra.NoArgs, nil, c.profiles)

	orders := add(cmd, "orders", "Lists orders, newest first", cobra.NoArgs,
		listFlags(map[string]string{"status": "only this status: pending, ready, processing, valid or invalid"}, operator.OrderFilters...), c.orders)
	add(orders, "show <order-id>", "Shows an order and its certificate chain", oneID("order id"), nil, c.order)

	add(cmd, "revoke <order-id>", "Revokes the certificate of an order", oneID("order id"), func(sc *cobra.Command) {
		sc.Flags().Int("reason", 0, "RFC 5280 CRLReason code (omit for none)")
	}, c.revoke)

	accounts := add(cmd, "accounts", "Lists accounts, newest first", cobra.NoArgs,
		listFlags(map[string]string{"status": "only this status: valid, deactivated or revoked"}, operator.AccountFilters...), c.accounts)
	add(accounts, "show <account-id>", "Shows an account", oneID("account id"), nil, c.accountOp(http.MethodGet, ""))
	add(accounts, "deactivate <account-id>", "Deactivates an account", oneID("account id"), nil, c.accountOp(http.MethodPost, "/deactivate"))

	jobsCmd := add(cmd, "jobs", "Lists durable jobs, newest first", cobra.NoArgs,
		listFlags(map[string]string{"status": "only this status: ready, running, done, failed or cancelled"}, operator.JobFilters...), c.jobs)
	add(jobsCmd, "show <job-id>", "Shows a job", oneID("job id"), nil, c.jobOp(http.MethodGet, ""))
	add(jobsCmd, "retry <job-id>", "Runs a job now (a failed or cancelled one with a fresh budget)", oneID("job id"), nil, c.jobOp(http.MethodPost, "/retry"))
	add(jobsCmd, "cancel <job-id>", "Cancels a job", oneID("job id"), nil, c.jobOp(http.MethodPost, "/cancel"))

	auditCmd := add(cmd, "audit", "Searches the audit trail, newest first", cobra.NoArgs,
		listFlags(nil, operator.AuditFilters...), c.audit)
	add(auditCmd, "prune", "Deletes the audit rows older than --before (the prune is audited)", cobra.NoArgs, func(sc *cobra.Command) {
		sc.Flags().String("before", "", "cutoff: an RFC 3339 time (2026-01-01T00:00:00Z) or an age (90d, 720h)")
	}, c.pruneAudit)

	crl := &cobra.Command{Use: "crl", Short: "Shows or regenerates a profile's CRL", SilenceUsage: true}
	refuseUnknownSubcommands(crl)
	cmd.AddCommand(crl)
	add(crl, "show <profile>", "Shows the CRL a profile serves", oneID("profile name"), nil, c.crlOp(http.MethodGet, ""))
	add(crl, "regenerate <profile>", "Publishes a new CRL for a profile's CA now", oneID("profile name"), nil, c.crlOp(http.MethodPost, "/regenerate"))

	eab := &cobra.Command{Use: "eab", Short: "Mints, lists and revokes external account binding keys", SilenceUsage: true}
	refuseUnknownSubcommands(eab)
	cmd.AddCommand(eab)
	add(eab, "create", "Mints a key; its MAC key is shown this once", cobra.NoArgs, func(sc *cobra.Command) {
		sc.Flags().String("profile", "", "the profile the key registers accounts in")
		sc.Flags().String("label", "", "who the key is for (kept with the accounts it binds)")
		sc.Flags().Bool("reusable", false, "bind any number of accounts, not one")
		sc.Flags().String("expires", "", "lifetime, such as 7d or 12h (default: none)")
	}, c.eabCreate)
	add(eab, "list", "Lists a profile's keys, newest first (never their MAC keys)", cobra.NoArgs, listFlags(map[string]string{"profile": "the profile whose keys to list (required)"}, operator.EABFilters...), c.eabList)
	add(eab, "revoke <kid>", "Revokes a key: it binds no new account", oneID("key id"), nil, c.eabRevoke)

	c.addRenewEarlyCommand(cmd)
	add(cmd, "migrate-store", "Copies a stopped instance's SQLite store into an empty PostgreSQL database (offline)", cobra.NoArgs, func(sc *cobra.Command) {
		sc.Flags().String("from", "", "the SQLite file (the embedded default keeps it at acme_proxy/acme_proxy.db in Caddy's data directory)")
		sc.Flags().String("to", "", "the PostgreSQL DSN, as the database postgres option takes it")
	}, c.migrateStore)
}

// cli runs the subcommands.
type cli struct{ out io.Writer }

// call sends one admin API request and returns the response body.
func (c *cli) call(cmd *cobra.Command, method, uri string, body any) ([]byte, error) {
	fl := caddycmd.Flags{FlagSet: cmd.Flags()}
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin API: %w", err)
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	h := http.Header{}
	h.Set(actorHeader, authority.ActorCLI)
	if u, err := user.Current(); err == nil {
		h.Set(operatorHeader, u.Username)
	}
	resp, err := caddycmd.AdminAPIRequest(addr, method, uri, h, rd)
	if err != nil {
		return nil, cleanAdminError(addr, err)
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// adminErrorRE matches Caddy's error for an answer of status 400 or more
// (caddycmd.AdminAPIRequest): its status and body.
var adminErrorRE = regexp.MustCompile(`(?s)^caddy responded with error: HTTP (\d+): (.*)$`)

// cleanAdminError turns the error of a request to the admin API at addr
// into what the operator reads: "caddy responded with error: HTTP 404:
// {"error":…}" into "HTTP 404: …", on one line of plain text (the
// message may quote what a client or an upstream CA chose, see
// printable); an answer that is not the admin API's JSON into an excerpt
// saying so; no answer at all into one that names the address asked.
func cleanAdminError(addr string, err error) error {
	m := adminErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		if strings.HasPrefix(err.Error(), "performing request: ") {
			return fmt.Errorf("no answer from Caddy's admin API at %s (is Caddy running with its admin endpoint there? name it with --address, or --config): %w",
				addr, err)
		}
		return err
	}
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(m[2]), &body) != nil || body.Error == "" {
		// Another server's page, or a Caddy without this plugin.
		return fmt.Errorf("HTTP %s, not an answer of the acme_proxy admin API (is %s Caddy's admin endpoint, with this plugin?): %s",
			m[1], addr, plainText(operator.Clip(strings.TrimSpace(m[2])), false))
	}
	return fmt.Errorf("HTTP %s: %s", m[1], plainText(body.Error, false))
}

// show prints a response: raw JSON with --json, else through human.
func (c *cli) show(cmd *cobra.Command, body []byte, v any, human func(w *tabwriter.Writer)) error {
	if asJSON, _ := cmd.Flags().GetBool("json"); asJSON {
		_, err := c.out.Write(body)
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the admin API answered something else than expected: %w", err)
	}
	printable(v)
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// filterQuery builds the query of a list from the flags set.
func filterQuery(cmd *cobra.Command, names ...string) string {
	q := url.Values{}
	for _, n := range names {
		if v, _ := cmd.Flags().GetString(n); v != "" {
			q.Set(n, v)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// printable rewrites, in place, every string of a decoded answer, and the
// JSON it keeps undecoded (an order's problem), so that it prints as plain
// text on one line: a control character (an escape
// sequence's ESC, a line break, a tab, C1), a line or paragraph separator,
// a bidirectional formatting character and a byte that is not UTF-8 are
// written out as Go writes them in a string ("\x1b", "\n", "\u202e").
// Clients choose some of these strings (the key id of a binding refused,
// a relaying CA's problem detail in a job's last error), and the operator's
// terminal would otherwise act on them: recolour or retitle it, erase the
// rows above, or show a forged row of the table. A certificate chain keeps
// its line breaks, and only them.
func printable(v any) { printableValue(reflect.ValueOf(v), false) }

func printableValue(v reflect.Value, multiline bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			printableValue(v.Elem(), multiline)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if t.Field(i).IsExported() {
				printableValue(v.Field(i), t.Field(i).Name == "ChainPEM")
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type() == rawJSONType {
			// JSON kept as the admin API sent it (an order's problem):
			// its strings may hold what JSON leaves unescaped (U+0080
			// on: C1 controls, bidirectional overrides), and indentation
			// that would break the row. One line, written out.
			if v.CanSet() && v.Len() > 0 {
				var b bytes.Buffer
				raw := v.Bytes()
				if json.Compact(&b, raw) == nil {
					raw = b.Bytes()
				}
				v.SetBytes([]byte(plainText(string(raw), false)))
			}
			return
		}
		for i := range v.Len() {
			printableValue(v.Index(i), multiline)
		}
	case reflect.Map:
		if v.Type().Elem().Kind() != reflect.String {
			return
		}
		for _, k := range v.MapKeys() {
			v.SetMapIndex(k, reflect.ValueOf(plainText(v.MapIndex(k).String(), false)).Convert(v.Type().Elem()))
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(plainText(v.String(), multiline))
		}
	}
}

// rawJSONType is the type of the JSON an answer keeps undecoded.
var rawJSONType = reflect.TypeFor[json.RawMessage]()

// plainText is s with what a terminal would act on written out (see
// printable); with multiline, a line break ("\n") is kept.
func plainText(s string, multiline bool) string {
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && multiline:
			b.WriteRune(r)
		case unicode.In(r, unicode.Cc, unicode.Zl, unicode.Zp, unicode.Bidi_Control):
			q := strconv.QuoteRune(r) // '\x1b', '\u202e', '\n'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func tsp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ts(*t)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func reasonText(r *int) string {
	if r == nil {
		return "-"
	}
	return acme.ReasonText(*r)
}

func identsText(ids []acme.Identifier) string {
	vals := make([]string, len(ids))
	for i, id := range ids {
		vals[i] = id.Value
	}
	return strings.Join(vals, ",")
}

func next(w io.Writer, cursor, flag string) {
	if cursor != "" {
		fmt.Fprintf(w, "\n(more: --%s %s)\n", flag, cursor)
	}
}

// ---- subcommands ----

func (c *cli) profiles(cmd *cobra.Command, _ []string) error {
	body, err := c.call(cmd, http.MethodGet, adminBase+"profiles", nil)
	if err != nil {
		return err
	}
	var v []operator.ProfileView
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "PROFILE\tPREFIX\tSIGNER\tREVOCATION\tCRL URL")
		for _, p := range v {
			crl := "-"
			if p.CRL {
				crl = p.Prefix + "/crl"
				if p.CRLURL != "" {
					crl = p.CRLURL
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Prefix, p.Signer, p.Revocation, crl)
		}
	})
}

// ageFlags makes the time flags names an RFC 3339 time for the admin API:
// they take an age too (1h, 7d), as prune's --before.
func ageFlags(cmd *cobra.Command, names ...string) error {
	for _, name := range names {
		if v, _ := cmd.Flags().GetString(name); v != "" {
			t, err := timeOrAge("--"+name, v, time.Now())
			if err != nil {
				return err
			}
			if err := cmd.Flags().Set(name, t.UTC().Format(time.RFC3339)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *cli) orders(cmd *cobra.Command, _ []string) error {
	if err := ageFlags(cmd, "since"); err != nil {
		return err
	}
	body, err := c.call(cmd, http.MethodGet, adminBase+"orders"+filterQuery(cmd, operator.OrderFilters...), nil)
	if err != nil {
		return err
	}
	var v operator.Page[operator.OrderView]
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "ORDER\tPROFILE\tSTATUS\tIDENTIFIERS\tCREATED\tSERIAL\tREVOKED")
		for _, o := range v.Items {
			serial, revoked := "-", "-"
			if o.Certificate != nil {
				serial, revoked = o.Certificate.Serial, tsp(o.Certificate.RevokedAt)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.ID, o.Profile, o.Status, identsText(o.Identifiers), ts(o.Created), serial, revoked)
		}
		next(w, v.Next, "after")
	})
}

func (c *cli) order(cmd *cobra.Command, args []string) error {
	body, err := c.call(cmd, http.MethodGet, adminBase+"orders/"+url.PathEscape(args[0]), nil)
	if err != nil {
		return err
	}
	var o operator.OrderView
	return c.show(cmd, body, &o, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "order:\t%s\nprofile:\t%s\naccount:\t%s\nstatus:\t%s\nidentifiers:\t%s\ncreated:\t%s\nexpires:\t%s\n",
			o.ID, o.Profile, o.Account, o.Status, identsText(o.Identifiers), ts(o.Created), ts(o.Expires))
		if len(o.Error) > 0 {
			fmt.Fprintf(w, "error:\t%s\n", o.Error)
		}
		if o.Replaces != "" {
			fmt.Fprintf(w, "replaces:\t%s\n", o.Replaces)
		}
		if o.FailureDetail != "" {
			fmt.Fprintf(w, "failure detail:\t%s\n", o.FailureDetail)
		}
		if cert := o.Certificate; cert != nil {
			fmt.Fprintf(w, "certificate:\t%s\nserial:\t%s\nvalid:\t%s to %s\nrevoked:\t%s\nreason:\t%s\n",
				cert.ID, cert.Serial, ts(cert.NotBefore), ts(cert.NotAfter), tsp(cert.RevokedAt), reasonText(cert.Reason))
			w.Flush()
			fmt.Fprintf(w, "\n%s", cert.ChainPEM)
		}
	})
}

func (c *cli) revoke(cmd *cobra.Command, args []string) error {
	var req revokeRequest
	if cmd.Flags().Changed("reason") {
		r, _ := cmd.Flags().GetInt("reason")
		req.Reason = &r
	}
	body, err := c.call(cmd, http.MethodPost, adminBase+"orders/"+url.PathEscape(args[0])+"/revoke", req)
	if err != nil {
		return err
	}
	var v revokeResponse
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		if v.Status == "queued" {
			fmt.Fprintf(w, "revocation of order %s queued as job %d; not confirmed yet: run this again in %ds to confirm\n",
				v.Order, v.Job, v.RetryAfter)
			return
		}
		cert := v.Certificate
		fmt.Fprintf(w, "revoked order %s: serial %s at %s, reason %s\n", v.Order, cert.Serial, tsp(cert.RevokedAt), reasonText(cert.Reason))
	})
}

func (c *cli) accounts(cmd *cobra.Command, _ []string) error {
	body, err := c.call(cmd, http.MethodGet, adminBase+"accounts"+filterQuery(cmd, operator.AccountFilters...), nil)
	if err != nil {
		return err
	}
	var v operator.Page[operator.AccountView]
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "ACCOUNT\tPROFILE\tSTATUS\tORDERS\tCONTACT\tEAB LABEL\tCREATED")
		for _, a := range v.Items {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.ID, a.Profile, a.Status, a.Orders, dash(strings.Join(a.Contact, ",")), dash(a.EABLabel), ts(a.Created))
		}
		next(w, v.Next, "after")
	})
}

func (c *cli) accountOp(method, action string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		body, err := c.call(cmd, method, adminBase+"accounts/"+url.PathEscape(args[0])+action, nil)
		if err != nil {
			return err
		}
		var a operator.AccountView
		return c.show(cmd, body, &a, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "account:\t%s\nprofile:\t%s\nstatus:\t%s\norders:\t%d\ncontact:\t%s\nthumbprint:\t%s\ncreated:\t%s\n",
				a.ID, a.Profile, a.Status, a.Orders, dash(strings.Join(a.Contact, ",")), a.Thumbprint, ts(a.Created))
		})
	}
}

func (c *cli) jobs(cmd *cobra.Command, _ []string) error {
	body, err := c.call(cmd, http.MethodGet, adminBase+"jobs"+filterQuery(cmd, operator.JobFilters...), nil)
	if err != nil {
		return err
	}
	var v operator.Page[operator.JobView]
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "JOB\tKIND\tKEY\tSTATUS\tATTEMPTS\tRUN AT\tLAST ERROR")
		for _, j := range v.Items {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Kind, dash(j.Key), j.StatusText(), j.Attempts, j.MaxAttempts,
				ts(j.RunAt), dash(oneLine(j.LastError, 60)))
		}
		next(w, v.Next, "before")
	})
}

// oneLine is s on one line, cut to about n bytes between characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if head, cut := textcut.Head(s, n, 1); cut {
		return head + "…"
	}
	return s
}

func (c *cli) jobOp(method, action string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		body, err := c.call(cmd, method, adminBase+"jobs/"+url.PathEscape(args[0])+action, nil)
		if err != nil {
			return err
		}
		var j operator.JobView
		return c.show(cmd, body, &j, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "job:\t%d\nkind:\t%s\nkey:\t%s\nstatus:\t%s\nattempts:\t%d/%d\nrun at:\t%s\ndeadline:\t%s\nlast error:\t%s\n",
				j.ID, j.Kind, dash(j.Key), j.StatusText(), j.Attempts, j.MaxAttempts, ts(j.RunAt), tsp(j.Deadline), dash(j.LastError))
		})
	}
}

func (c *cli) audit(cmd *cobra.Command, _ []string) error {
	if err := ageFlags(cmd, "since", "until"); err != nil {
		return err
	}
	body, err := c.call(cmd, http.MethodGet, adminBase+"audit"+filterQuery(cmd, operator.AuditFilters...), nil)
	if err != nil {
		return err
	}
	var v operator.Page[operator.AuditView]
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "ID\tAT\tEVENT\tOUTCOME\tPROFILE\tACTOR\tORDER\tSERIAL\tCLIENT\tREASON")
		for _, e := range v.Items {
			actor := e.Actor.Kind
			if e.Actor.ID != "" {
				actor += ":" + e.Actor.ID
			}
			cl := e.ClientIP
			if e.ClientName != "" {
				cl += " (" + e.ClientName + ")"
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, ts(e.At), e.Event, e.Outcome, dash(e.Profile),
				oneLine(actor, 40), dash(e.Order), dash(e.Serial), dash(cl), dash(e.Reason))
		}
		next(w, v.Next, "before")
	})
}

// pruneCutoff reads --before of audit prune: an RFC 3339 time, or an age
// in Caddy's duration syntax counted back from now.
func pruneCutoff(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, fmt.Errorf("--before is required: an RFC 3339 time (2026-01-01T00:00:00Z) or an age (90d, 720h)")
	}
	return timeOrAge("--before", v, now)
}

// timeOrAge reads a time flag: an RFC 3339 time, or an age in Caddy's
// duration syntax (90d, 1h) counted back from now.
func timeOrAge(flag, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := caddy.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%s %q is neither an RFC 3339 time nor a positive age such as 90d", flag, v)
	}
	return now.Add(-d), nil
}

func (c *cli) pruneAudit(cmd *cobra.Command, _ []string) error {
	v, _ := cmd.Flags().GetString("before")
	before, err := pruneCutoff(v, time.Now())
	if err != nil {
		return err
	}
	body, err := c.call(cmd, http.MethodPost, adminBase+"audit/prune?before="+url.QueryEscape(before.UTC().Format(time.RFC3339)), nil)
	if err != nil {
		return err
	}
	var res operator.AuditPruneView
	return c.show(cmd, body, &res, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "deleted %d audit rows older than %s\n", res.Deleted, ts(res.Before))
	})
}

func (c *cli) crlOp(method, action string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		body, err := c.call(cmd, method, adminBase+"crl/"+url.PathEscape(args[0])+action, nil)
		if err != nil {
			return err
		}
		var v operator.CRLView
		return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "profile:\t%s\nissuer:\t%s\nnumber:\t%d\nthis update:\t%s\nnext update:\t%s\nentries:\t%d\n",
				v.Profile, v.Issuer, v.Number, ts(v.ThisUpdate), ts(v.NextUpdate), v.Entries)
		})
	}
}

func (c *cli) eabCreate(cmd *cobra.Command, _ []string) error {
	var req eabCreateRequest
	req.Profile, _ = cmd.Flags().GetString("profile")
	req.Label, _ = cmd.Flags().GetString("label")
	req.Reusable, _ = cmd.Flags().GetBool("reusable")
	req.Expires, _ = cmd.Flags().GetString("expires")
	body, err := c.call(cmd, http.MethodPost, adminBase+"eab/create", req)
	if err != nil {
		return err
	}
	var k operator.MintedEABKey
	return c.show(cmd, body, &k, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "kid:\t%s\nhmac key:\t%s\nprofile:\t%s\nlabel:\t%s\nreusable:\t%v\nexpires:\t%s\n",
			k.KID, k.HMACKey, k.Profile, k.Label, k.Reusable, tsp(k.Expires))
		fmt.Fprintln(w, "\nThe hmac key is shown this once; hand both to the client (certbot --eab-kid --eab-hmac-key).")
	})
}

func (c *cli) eabList(cmd *cobra.Command, _ []string) error {
	body, err := c.call(cmd, http.MethodGet, adminBase+"eab"+filterQuery(cmd, operator.EABFilters...), nil)
	if err != nil {
		return err
	}
	var v operator.Page[operator.EABKeyView]
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "KID\tLABEL\tSTATE\tREUSABLE\tBOUND ACCOUNT\tBOUND\tCREATED\tUSED\tEXPIRES")
		for _, k := range v.Items {
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%d\t%s\t%s\t%s\n", k.KID, k.Label, k.State, k.Reusable, dash(k.BoundAccount),
				k.BoundCount, ts(k.Created), tsp(k.Used), tsp(k.Expires))
		}
		next(w, v.Next, "after")
	})
}

func (c *cli) eabRevoke(cmd *cobra.Command, args []string) error {
	body, err := c.call(cmd, http.MethodPost, adminBase+"eab/"+url.PathEscape(args[0])+"/revoke", nil)
	if err != nil {
		return err
	}
	var k operator.EABKeyView
	return c.show(cmd, body, &k, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "revoked EAB key %s (%s) at %s\n", k.KID, k.Label, tsp(k.Revoked))
	})
}
