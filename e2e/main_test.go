//go:build unix

package e2e

import (
	"os"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// The fleet and split-roles tests share one throwaway PostgreSQL cluster, stopped when
// the binary's tests are done.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
