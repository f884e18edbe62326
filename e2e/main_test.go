//go:build unix

package e2e

import (
	"os"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// TestMain stops the PostgreSQL cluster the split-roles test starts.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
