//go:build unix

package e2e

import (
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// startDNS runs the test DNS server for zone (A 127.0.0.1 for zone and every
// name below it, NXDOMAIN outside it) and returns its "127.0.0.1:<port>";
// it stops on cleanup.
func startDNS(t *testing.T, zone string) string {
	t.Helper()
	d, err := testdns.Start(zone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d.Addr
}
