package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"

	xacme "golang.org/x/crypto/acme"
)

// A profile's URLs and CAA names differ per deployment, and a Caddyfile
// shared between deployments writes them with placeholders: each is used
// with the {env.*} value — the directory's terms of service, website
// and CAA identities, the CRL distribution point of the leaves, and the
// account URI prefix a CAA record's accounturi is matched against.
func TestAProfilesURLsAndCAANamesAreUsedWithTheirPlaceholdersReplaced(t *testing.T) {
	const host, profile = "ca.placeholder.test", "hosted"
	t.Setenv("E2E_CA_HOST", host)
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv, httpPort := serveE2EHTTP01(t, ln), e2ePort(ln)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t), ExtraProfiles: fmt.Sprintf(`	acme_proxy {
		profile %s
		resolvers %s
		validation_ports {
			http %d
		}
		crl_url          http://{env.E2E_CA_HOST}/acme/%[1]s/crl
		terms_of_service https://{env.E2E_CA_HOST}/tos
		website          https://{env.E2E_CA_HOST}/about
		caa {
			identities         {env.E2E_CA_HOST}
			account_uri_prefix https://{env.E2E_CA_HOST}/acme/%[1]s/account/
		}
	}`, profile, env.DNSAddr, httpPort)})

	resp, err := env.client.Get(env.directoryURL(profile))
	if err != nil {
		t.Fatal(err)
	}
	var dir struct {
		Meta struct {
			TermsOfService string   `json:"termsOfService"`
			Website        string   `json:"website"`
			CAAIdentities  []string `json:"caaIdentities"`
		} `json:"meta"`
	}
	err = json.NewDecoder(resp.Body).Decode(&dir)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the directory: %d, %v", resp.StatusCode, err)
	}
	if m := dir.Meta; m.TermsOfService != "https://"+host+"/tos" || m.Website != "https://"+host+"/about" || !slices.Equal(m.CAAIdentities, []string{host}) {
		t.Errorf("the directory's meta is %+v; want the placeholders replaced by %s", m, host)
	}

	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(profile)}
	acct, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	// The name's CAA record allows this account only, by the URI the
	// replaced prefix makes of its id.
	const name = "hosted.example.com"
	env.dns.AddCAA(name, 0, "issue", fmt.Sprintf("%s; accounturi=https://%s/acme/%s/account/%s", host, host, profile, path.Base(acct.URI)))
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(name))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, order.AuthzURLs[0]))
	leaf := env.checkIssued(t, e2eFinishOrder(ctx, t, c, order, []string{name}), name)
	if dp := leaf.CRLDistributionPoints; len(dp) != 1 || !strings.HasPrefix(dp[0], "http://"+host+"/acme/"+profile+"/crl/") {
		t.Errorf("the leaf's CRL distribution points are %q; want one under http://%s/acme/%s/crl/", dp, host, profile)
	}
}
