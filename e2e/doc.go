// Package e2e holds end-to-end tests: real ACME clients (Debian's certbot
// and dehydrated) against the caddy binary built from cmd/caddy, run as a
// separate process.
//
// The tests skip when a program they need is not on PATH, and fail instead
// when ACMEPROXY_E2E=1 (which .ci/run sets after installing them).
package e2e
