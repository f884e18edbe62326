package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/internal/retryafter"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Webhook request headers.
const (
	// SignatureHeader carries the lower-case hex HMAC-SHA256 of the body
	// under the destination's secret.
	SignatureHeader = "X-Acme-Proxy-Signature"
	// EventHeader names the event.
	EventHeader = "X-Acme-Proxy-Event"
	// DeliveryHeader is the delivery's job id: the same on every attempt,
	// so a receiver can drop a delivery it has already processed. The
	// body's "delivery" holds it too, under the signature.
	DeliveryHeader = "X-Acme-Proxy-Delivery"
)

// requestHeaders are the headers each webhook request sets itself, which
// a destination's headers may not name: the ones above and Content-Type
// (the body is JSON), User-Agent, and those Go's HTTP client writes from
// the request rather than its header map (Host is the URL's).
var requestHeaders = []string{SignatureHeader, EventHeader, DeliveryHeader,
	"Content-Type", "User-Agent", "Host", "Content-Length", "Transfer-Encoding", "Trailer"}

// eventJSON is a delivery's body (a webhook's, a script's stdin): the
// event and the delivery's job id, the same on every attempt. The id is
// in the body, which the signature covers, not only in DeliveryHeader:
// a receiver that drops a delivery id it has seen, and an event older
// than Lifetime, cannot be fooled by a replayed request with a new
// header.
func eventJSON(ev Event, delivery int64) ([]byte, error) {
	return json.Marshal(struct {
		Event
		Delivery int64 `json:"delivery"`
	}{ev, delivery})
}

// Sign is the signature of body under secret, as SignatureHeader carries it.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// webhook POSTs the event. 2xx is delivered; 408, 429 and 5xx (and any
// transport failure) are retried, a Retry-After of any of them honoured;
// anything else is a permanent refusal.
func (d *Deliverer) webhook(ctx context.Context, dst Destination, ev Event, body []byte, delivery int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dst.URL, bytes.NewReader(body))
	if err != nil {
		return permanent(errors.New("the URL does not make a request"))
	}
	for k, v := range dst.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "caddy-acme-proxy")
	req.Header.Set(EventHeader, ev.Event)
	req.Header.Set(DeliveryHeader, strconv.FormatInt(delivery, 10))
	if dst.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(dst.Secret, body))
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return errors.New(transportError(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		// A Retry-After is honoured on every answer retried, not only
		// on 429 and 503: a gateway's 502 may carry one too.
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return &retryAfterError{err: fmt.Errorf("HTTP %d, retry after %s", code, after), after: after}
		}
		return fmt.Errorf("HTTP %d", code)
	}
	return permanent(fmt.Errorf("HTTP %d", code))
}

// transportError describes a failed request without its URL, which may
// carry credentials in its userinfo or query.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
		if ue.Timeout() {
			return "timed out: " + err.Error()
		}
	}
	return err.Error()
}

// retryAfter parses a Retry-After header (seconds or an HTTP date),
// capped at maxRetryAfter.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	return retryafter.Parse(v, now, maxRetryAfter)
}
