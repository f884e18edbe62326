package caddyacmeproxy

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The proxy's metrics, prefixed caddy_acme_proxy_. The collectors are
// created once per process and registered on each config's registry (as
// Caddy's reverse proxy does), so counters survive config reloads. Labels
// are bounded: profile, route and job kind names, status codes, challenge
// types, outcome and reason classes — never an identifier, a serial or an
// address.
var proxyMetrics = struct {
	once sync.Once

	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	issued          *prometheus.CounterVec
	failed          *prometheus.CounterVec
	deferred        *prometheus.CounterVec
	revoked         *prometheus.CounterVec
	validations     *prometheus.CounterVec
	refusals        *prometheus.CounterVec
	rateLimited     *prometheus.CounterVec
	jobRuns         *prometheus.CounterVec
	jobDuration     *prometheus.HistogramVec
	upstream        *prometheus.HistogramVec
}{}

const metricsNamespace, metricsSubsystem = "caddy", "acme_proxy"

func initProxyMetrics() {
	proxyMetrics.once.Do(func() {
		opts := func(name, help string) (string, string, string, string) {
			return metricsNamespace, metricsSubsystem, name, help
		}
		counter := func(name, help string, labels ...string) *prometheus.CounterVec {
			ns, sub, n, h := opts(name, help)
			return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: n, Help: h}, labels)
		}
		histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
			ns, sub, n, h := opts(name, help)
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: n, Help: h,
				Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, labels)
		}
		m := &proxyMetrics
		m.requests = counter("requests_total", "ACME requests by profile, route and status code.", "profile", "route", "status")
		m.requestDuration = histogram("request_duration_seconds", "ACME request durations by profile and route.", "profile", "route")
		m.issued = counter("certificates_issued_total", "Certificates issued by profile.", "profile")
		m.failed = counter("certificates_failed_total", "Issuances that failed for good (the order invalid), by profile and reason class.", "profile", "reason")
		m.deferred = counter("certificates_deferred_total", "Finalizes whose signing a fault on our side put off (the order stays processing and is signed later), "+
			"by profile and reason class.", "profile", "reason")
		m.revoked = counter("revocations_total", "Revocations recorded, by profile.", "profile")
		m.validations = counter("validations_total", "Challenge validations by profile, challenge type and outcome.",
			"profile", "challenge", "outcome")
		m.refusals = counter("revocations_refused_total", "revoke-cert requests refused, by profile and reason kind "+
			"(malformed, unknown_certificate, not_authorized, already_revoked, bad_reason, expired, unpublishable).", "profile", "reason")
		m.rateLimited = counter("rate_limited_total", "Requests refused by one of a profile's limits, by profile and limit "+
			"(accounts_per_ip, orders_per_account, pending_authorizations, failed_validations, duplicate_certificates).", "profile", "limit")
		m.jobRuns = counter("job_runs_total", "Job attempts by kind and outcome (done, retry, retry_after, failed, reschedule), and jobs abandoned.",
			"kind", "outcome")
		m.jobDuration = histogram("job_duration_seconds", "Job attempt durations by kind.", "kind")
		m.upstream = histogram("upstream_request_duration_seconds", "Requests to a relay profile's upstream CA, by profile and status class.",
			"profile", "status")
	})
}

// registerProxyMetrics registers the collectors, one reading the store
// at scrape time and one reporting skew, the clock skew the config's app
// measured, on a config's registry. inService lists the CAs whose CRLs
// the mounted profiles keep publishing (see storeCollector).
func registerProxyMetrics(reg *prometheus.Registry, db *store.DB, inService func(context.Context) (map[string]bool, error), skew *clockSkew) error {
	initProxyMetrics()
	m := &proxyMetrics
	for _, c := range []prometheus.Collector{m.requests, m.requestDuration, m.issued, m.failed, m.deferred, m.revoked,
		m.validations, m.refusals, m.rateLimited, m.jobRuns, m.jobDuration, m.upstream, &storeCollector{db: db, inService: inService},
		clockCollector{skew}} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// serverMetrics is authority.Metrics over the collectors.
type serverMetrics struct{}

func (serverMetrics) Request(profile, route string, status int, d time.Duration) {
	k := requestKey{profile, route, status}
	m, ok := requestMetrics.Load(k)
	if !ok {
		m, _ = requestMetrics.LoadOrStore(k, requestSeries{
			count:    proxyMetrics.requests.WithLabelValues(profile, route, strconv.Itoa(status)),
			duration: proxyMetrics.requestDuration.WithLabelValues(profile, route),
		})
	}
	rs := m.(requestSeries)
	rs.count.Inc()
	rs.duration.Observe(d.Seconds())
}

// requestMetrics holds the series of each (profile, route, status) seen,
// looked up once instead of by their label values on every request. The
// labels are bounded (see proxyMetrics), and so is this map; the series
// are the collectors' own, which live as long as the process.
var requestMetrics sync.Map // requestKey → requestSeries

type requestKey struct {
	profile, route string
	status         int
}

type requestSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

func (serverMetrics) Issued(profile string) { proxyMetrics.issued.WithLabelValues(profile).Inc() }
func (serverMetrics) IssueFailed(profile, reason string) {
	proxyMetrics.failed.WithLabelValues(profile, reason).Inc()
}
func (serverMetrics) IssueDeferred(profile, reason string) {
	proxyMetrics.deferred.WithLabelValues(profile, reason).Inc()
}
func (serverMetrics) Revoked(profile string) { proxyMetrics.revoked.WithLabelValues(profile).Inc() }
func (serverMetrics) Validated(profile, challenge, outcome string) {
	proxyMetrics.validations.WithLabelValues(profile, challenge, outcome).Inc()
}

func (serverMetrics) RevocationRefused(profile, reason string) {
	proxyMetrics.refusals.WithLabelValues(profile, reason).Inc()
}

func (serverMetrics) RateLimited(profile, limit string) {
	proxyMetrics.rateLimited.WithLabelValues(profile, limit).Inc()
}

var (
	_ authority.Metrics      = serverMetrics{}
	_ authority.LimitMetrics = serverMetrics{}
)

// observeUpstream records one request of a relay profile to its upstream
// CA, by status class ("2xx", "4xx", …; "error" without a response).
func observeUpstream(profile string, d time.Duration, status int) {
	initProxyMetrics()
	class := "error"
	if status > 0 {
		class = strconv.Itoa(status/100) + "xx"
	}
	proxyMetrics.upstream.WithLabelValues(profile, class).Observe(d.Seconds())
}

// measuredJobs wraps a job handler to count its attempts by outcome and
// time them; it keeps the handler's lease and concurrency.
type measuredJobs struct{ jobs.Handler }

func (m measuredJobs) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	start := time.Now()
	out := m.Handler.Run(ctx, job)
	proxyMetrics.jobDuration.WithLabelValues(job.Kind).Observe(time.Since(start).Seconds())
	proxyMetrics.jobRuns.WithLabelValues(job.Kind, out.Kind()).Inc()
	return out
}

// Abandon counts an abandon once it succeeded: one that failed is tried
// again.
func (m measuredJobs) Abandon(ctx context.Context, job *jobs.Job, reason string) error {
	err := m.Handler.Abandon(ctx, job, reason)
	if err == nil {
		proxyMetrics.jobRuns.WithLabelValues(job.Kind, "abandoned").Inc()
	}
	return err
}

func (m measuredJobs) Lease() time.Duration {
	if l, ok := m.Handler.(jobs.Leaser); ok {
		return l.Lease()
	}
	return 0 // the runner's default
}

func (m measuredJobs) Concurrency() int {
	if l, ok := m.Handler.(jobs.Limiter); ok {
		return l.Concurrency()
	}
	return 0 // the runner's default
}

func measured(hs []jobs.Handler) []jobs.Handler {
	initProxyMetrics()
	out := make([]jobs.Handler, len(hs))
	for i, h := range hs {
		out[i] = measuredJobs{h}
	}
	return out
}

// clockSkew is the last comparison of this process's clock with the
// database server's that an app's job runner made (observe); nil until
// one was made, and for ever on SQLite, which has no server clock. Each
// app has its own, reported on its config's registry: after a reload
// onto SQLite the gauge is gone, though the old config's runner, on
// PostgreSQL, may measure again until it stops.
type clockSkew struct{ last atomic.Pointer[time.Duration] }

// observe is a runner's jobs.RunnerOptions.OnClockReading.
func (k *clockSkew) observe(c store.ClockReading) {
	s := c.Skew()
	k.last.Store(&s)
}

var clockSkewDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "clock_skew_seconds"),
	"How far this instance's clock runs ahead of the PostgreSQL server's (negative: behind), as last measured; absent on SQLite.", nil, nil)

// clockCollector reports an app's clockSkew, once measured.
type clockCollector struct{ skew *clockSkew }

func (clockCollector) Describe(ch chan<- *prometheus.Desc) { ch <- clockSkewDesc }

func (c clockCollector) Collect(ch chan<- prometheus.Metric) {
	if s := c.skew.last.Load(); s != nil {
		ch <- prometheus.MustNewConstMetric(clockSkewDesc, prometheus.GaugeValue, s.Seconds())
	}
}

// storeCollector reads gauges from the store at scrape time: the job
// queue by kind and status, the used-nonce store's size, and each CRL's
// nextUpdate. Each is one cheap aggregate query.
//
// A CRL's nextUpdate is reported while its CA is in service — inService
// names it: a mounted profile keeps publishing its CRL, until the CA
// expires. The CRL of an expired CA stays in the store but is refreshed
// no more, so its nextUpdate falls behind for good: reported, it would
// keep an alert on a lapsing CRL firing for ever after each renewal of
// the CA, one series more each time. When inService cannot tell (it
// fails), every CRL is reported.
//
// A gauge the store cannot be read for (the database away) is left out
// of that scrape rather than reported as an error: Caddy serves the
// whole registry at once, and one collector's error fails the scrape of
// every metric — the requests answered 503 meanwhile among them. The
// store's own log lines (store_unavailable) say why.
type storeCollector struct {
	db        *store.DB
	inService func(context.Context) (map[string]bool, error)
}

var (
	jobsDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "jobs"),
		"Jobs in the queue by kind and status.", []string{"kind", "status"}, nil)
	noncesDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "used_nonces"),
		"Nonces remembered as used (the nonce store's size).", nil, nil)
	crlNextUpdateDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "crl_next_update_timestamp_seconds"),
		"The nextUpdate of the published CRL of each issuing CA in service (until it expires), as a Unix time.", []string{"issuer"}, nil)
)

// storeScrapeTimeout bounds the store's reads of one scrape.
const storeScrapeTimeout = 5 * time.Second

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- noncesDesc
	ch <- crlNextUpdateDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), storeScrapeTimeout)
	defer cancel()
	if counts, err := c.db.CountJobs(ctx); err == nil {
		for _, n := range counts {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n.N), n.Kind, string(n.Status))
		}
	}
	if n, err := c.db.CountUsedNonces(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(noncesDesc, prometheus.GaugeValue, float64(n))
	}
	if crls, err := c.db.CRLNextUpdates(ctx); err == nil {
		var live map[string]bool
		if c.inService != nil {
			if l, err := c.inService(ctx); err == nil {
				live = l
			}
		}
		for _, u := range crls {
			if live != nil && !live[u.IssuerKeyID] {
				continue // its CA expired, or no profile here publishes it
			}
			ch <- prometheus.MustNewConstMetric(crlNextUpdateDesc, prometheus.GaugeValue, float64(u.NextUpdate.Unix()), u.IssuerKeyID)
		}
	}
}
