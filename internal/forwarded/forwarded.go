// Package forwarded carries the scheme a request's client used when a
// proxy the HTTP server trusts (Caddy's trusted_proxies) terminated TLS
// in front of it: from the Caddy glue, which alone knows the proxy is
// trusted, to the handlers that build absolute URLs (the ACME front) or
// compare an Origin (the operator's web page). Any client can send
// X-Forwarded-Proto, so only the glue may set it, and only for a trusted
// proxy's request.
package forwarded

import (
	"context"
	"net/http"
	"strings"
)

type protoKey struct{}

// WithProto tells the handlers that the request with ctx came through a
// trusted proxy whose client reached it over proto, as the proxy's
// X-Forwarded-Proto says. A proto other than http or https (any case,
// spaces trimmed) changes nothing.
func WithProto(ctx context.Context, proto string) context.Context {
	proto = strings.ToLower(strings.TrimSpace(proto))
	if proto != "http" && proto != "https" {
		return ctx
	}
	return context.WithValue(ctx, protoKey{}, proto)
}

// FromTrustedProxy is WithProto for the request r of a proxy the server
// trusts: the last X-Forwarded-Proto it sent, if any.
func FromTrustedProxy(r *http.Request) context.Context {
	protos := r.Header.Values("X-Forwarded-Proto")
	if len(protos) == 0 {
		return r.Context()
	}
	return WithProto(r.Context(), protos[len(protos)-1])
}

// Scheme is the scheme r's client used: the one WithProto gave, else
// the connection's.
func Scheme(r *http.Request) string {
	if proto, ok := r.Context().Value(protoKey{}).(string); ok {
		return proto
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
