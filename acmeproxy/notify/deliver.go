package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/internal/execpath"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// Defaults of a Deliverer.
const (
	DefaultTimeout = 30 * time.Second
	// notConfiguredDelay is how long a delivery whose destination this
	// process does not know (another instance's, or the next config's)
	// waits before it is tried again; it spends no attempt, and the job's
	// deadline bounds the waiting.
	notConfiguredDelay = 30 * time.Second
	// maxRetryAfter caps a receiver's Retry-After.
	maxRetryAfter = time.Hour
)

// Options tune a Deliverer. The zero value is a working default.
type Options struct {
	Logger *zap.Logger // default: no logging
	// Timeout bounds one delivery attempt (HTTP request, SMTP session,
	// script run). Default DefaultTimeout.
	Timeout time.Duration
	// HTTPTransport, when set, carries webhook requests.
	HTTPTransport http.RoundTripper
	// TLS, when set, is the base TLS config of SMTP connections (its
	// ServerName is set per destination); tests use it to trust their
	// server.
	TLS *tls.Config
	// ScriptEnv is a script's whole environment; default
	// PATH=/usr/local/bin:/usr/bin:/bin.
	ScriptEnv []string
}

// Deliverer is the notify_deliver job handler, and the registry of the
// destinations this process knows.
type Deliverer struct {
	opts   Options
	log    *zap.Logger
	client *http.Client

	mu    sync.RWMutex
	dests map[string]Destination
	// legacy finds destinations by the ID earlier releases wrote
	// (legacyID), so that jobs queued before an upgrade are delivered
	// while the config is the same.
	legacy map[string]Destination
}

// NewDeliverer returns a Deliverer that knows no destination yet.
func NewDeliverer(opts Options) *Deliverer {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ScriptEnv == nil {
		opts.ScriptEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	tr := opts.HTTPTransport
	if tr == nil {
		tr = http.DefaultTransport
	}
	return &Deliverer{
		opts: opts, log: opts.Logger, dests: map[string]Destination{}, legacy: map[string]Destination{},
		client: &http.Client{
			Transport: tr, Timeout: opts.Timeout,
			// A redirect is an answer of its own: not followed (it could
			// carry the signed body somewhere else).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Register validates destinations and makes them deliverable. A
// script's program must exist and be executable now, as the config
// loads, rather than fail its first delivery.
func (d *Deliverer) Register(dests ...Destination) error {
	for i := range dests {
		if err := dests[i].Validate(); err != nil {
			return err
		}
		if dests[i].Type == TypeScript {
			if err := execpath.Check(dests[i].Command); err != nil {
				return fmt.Errorf("notify script: command: %w", err)
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Two destinations of one notify list (one scope) that differ only
	// in their secrets have one ID: which secret a queued delivery was
	// meant to carry could not be told.
	seen := map[string]Destination{}
	for _, dst := range dests {
		id := dst.ID()
		prev, ok := seen[id]
		if !ok {
			prev, ok = d.dests[id]
		}
		if ok && !reflect.DeepEqual(prev, dst) {
			return fmt.Errorf("notify %s: two destinations to %s differ only in their secrets (secret, header values, username, password or the URL's credentials) or helo; merge them or give them different events", dst.Type, dst.Describe())
		}
		seen[id] = dst
	}
	for id, dst := range seen {
		d.dests[id] = dst
		d.legacy[dst.legacyID()] = dst
	}
	return nil
}

func (d *Deliverer) lookup(id string) (Destination, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if dst, ok := d.dests[id]; ok {
		return dst, true
	}
	dst, ok := d.legacy[id]
	return dst, ok
}

// Kind implements jobs.Handler.
func (d *Deliverer) Kind() string { return Kind }

// Concurrency lets deliveries to slow receivers overlap.
func (d *Deliverer) Concurrency() int { return 16 }

// Recover implements jobs.Handler: deliveries are stored with their event,
// so nothing can be owed without a job.
func (d *Deliverer) Recover(context.Context, *jobs.Queue) error { return nil }

// Run implements jobs.Handler: one delivery attempt.
func (d *Deliverer) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	var p payload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	dst, ok := d.lookup(p.Destination)
	if !ok {
		return jobs.RetryAfter("destination "+p.Via+" is not configured in this process", notConfiguredDelay)
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	body, err := eventJSON(p.Event, job.ID)
	if err != nil {
		return jobs.Failed(err.Error())
	}
	switch dst.Type {
	case TypeWebhook:
		err = d.webhook(ctx, dst, p.Event, body, job.ID)
	case TypeEmail:
		err = d.email(ctx, dst, p.Event)
	case TypeScript:
		err = d.script(ctx, dst, body)
	default:
		err = permanent(fmt.Errorf("unknown destination type %q", dst.Type))
	}
	if err == nil {
		d.log.Debug("notification delivered", zap.String("event", "notification_delivered"),
			zap.String("notification", p.Event.Event), zap.String("destination", dst.Describe()), zap.Int64("job", job.ID))
		return jobs.Done()
	}
	if pe := (*partialError)(nil); errors.As(err, &pe) {
		// Delivered, to some: done, not retried (that would mail the
		// others again); the refused recipients are named here.
		d.log.Warn("notification partly delivered", zap.String("event", "notification_partly_delivered"),
			zap.String("notification", p.Event.Event), zap.String("profile", p.Event.Profile),
			zap.String("destination", dst.Describe()), zap.Int64("job", job.ID),
			zap.Strings("delivered", pe.delivered), zap.Strings("refused", pe.refused))
		return jobs.Done()
	}
	reason := dst.Describe() + ": " + err.Error()
	if pe := (*permanentError)(nil); errors.As(err, &pe) {
		return jobs.Failed(reason) // logged once, by Abandon
	}
	d.log.Debug("notification attempt failed", zap.String("event", "notification_attempt_failed"),
		zap.String("notification", p.Event.Event), zap.String("destination", dst.Describe()),
		zap.Int64("job", job.ID), zap.Int("attempt", job.Attempts), zap.String("error", reason))
	if ra := (*retryAfterError)(nil); errors.As(err, &ra) {
		// The receiver's pause is honoured, and the attempt spent: one
		// that answers "503, Retry-After: 0" for a day must not be asked
		// again every poll until the delivery's deadline.
		return jobs.RetryNoSooner(reason, ra.after)
	}
	return jobs.Retry(reason)
}

// Abandon implements jobs.Handler: the one log line of a notification
// that will not be delivered (a permanent refusal, attempts or time
// exhausted, an operator's cancel). reason names the destination by host.
func (d *Deliverer) Abandon(_ context.Context, job *jobs.Job, reason string) error {
	var p payload
	_ = jobs.Decode(job, &p)
	d.log.Error("notification abandoned", zap.String("event", "notification_abandoned"),
		zap.String("notification", p.Event.Event), zap.String("profile", p.Event.Profile),
		zap.String("destination", p.Via), zap.Int64("job", job.ID), zap.Int("attempts", job.Attempts),
		zap.String("reason", reason))
	return nil
}

// permanentError is a delivery failure that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

// retryAfterError is a receiver's request to come back later.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

var _ jobs.Handler = (*Deliverer)(nil)
