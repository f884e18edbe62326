package caddyacmeproxy

import (
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// addRenewEarlyCommand adds `caddy acme-proxy renew-early` to cmd.
func (c *cli) addRenewEarlyCommand(cmd *cobra.Command) {
	sub := &cobra.Command{
		Use:   "renew-early",
		Short: "Asks the clients of the selected certificates to renew now (RFC 9773 renewal information)",
		Long: `Moves the renewal window of the selected certificates to now: a client that
reads renewalInfo (lego, certbot 4+, acme.sh, Caddy) renews at its next check.
The criteria combine (AND); at least one besides --profile is required.
The request is stored with each certificate and audited (event renew_early).`,
		Args: cobra.NoArgs, RunE: c.renewEarly, SilenceUsage: true,
	}
	f := sub.Flags()
	f.String("profile", "", "only certificates of this profile")
	f.StringSlice("serial", nil, "a certificate serial in hex (repeat or comma-separate)")
	f.StringSlice("order", nil, "an order id (repeat or comma-separate)")
	f.String("identifier", "", `an identifier of the certificate, "*" for any run of characters (*.example.com)`)
	f.String("account", "", "certificates issued to this account")
	f.String("issuer", "", "certificates signed by this CA key id (its subject key identifier in hex)")
	f.String("explanation-url", "", "a page telling the clients' operators why (sent as explanationURL)")
	cmd.AddCommand(sub)
}

func (c *cli) renewEarly(cmd *cobra.Command, _ []string) error {
	f := cmd.Flags()
	var req operator.RenewEarlyRequest
	req.Profile, _ = f.GetString("profile")
	req.Serials, _ = f.GetStringSlice("serial")
	req.Orders, _ = f.GetStringSlice("order")
	req.Identifier, _ = f.GetString("identifier")
	req.Account, _ = f.GetString("account")
	req.Issuer, _ = f.GetString("issuer")
	req.ExplanationURL, _ = f.GetString("explanation-url")
	body, err := c.call(cmd, http.MethodPost, adminBase+"renew-early", req)
	if err != nil {
		return err
	}
	var v operator.RenewEarlyView
	return c.show(cmd, body, &v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "PROFILE\tSERIAL\tORDER\tACCOUNT\tNOT AFTER")
		for _, x := range v.Certificates {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", x.Profile, x.Serial, x.Order, x.Account, ts(x.NotAfter))
		}
		noun := "certificates"
		if v.Count == 1 {
			noun = "certificate"
		}
		fmt.Fprintf(w, "\n%d %s asked to renew now (%s)\n", v.Count, noun, ts(v.At))
		if v.Count > len(v.Certificates) {
			fmt.Fprintf(w, "(%d listed; the audit trail lists each: caddy acme-proxy audit --event renew_early --since %s)\n",
				len(v.Certificates), v.At.UTC().Format(time.RFC3339))
		}
	})
}
