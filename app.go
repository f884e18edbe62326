package caddyacmeproxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	apcaddyfile "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/internal/incarnation"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// App is the acme_proxy app: it owns the store (shared across config
// reloads), the job queue and runner, and the registry of mounted
// profiles.
type App struct {
	acmeproxy.AppConfig
	// Postgres, when set, is the PostgreSQL database the store lives in
	// instead of the SQLite file of Database (setting both is an error):
	// a DSN as libpq takes it, postgres://user@host/db?sslmode=verify-full
	// or host=… dbname=…, in which Caddy placeholders such as
	// {env.PGPASSWORD} are replaced. libpq's environment (PGPASSWORD,
	// PGSSLROOTCERT, …) applies too. The DSN is never logged: the store
	// names itself by host and database.
	Postgres string `json:"postgres,omitempty"`

	log   *zap.Logger
	dbKey string
	// newFile is the SQLite file of the store when it did not exist at
	// Provision: Start records the file it creates in createdFiles.
	newFile string
	db      *store.DB
	queue   *jobs.Queue
	runner  *jobs.Runner
	// runKinds are the kinds the runner handles, set at Start: the
	// operator's pages read it while a reload may be starting the app.
	runKinds atomic.Pointer[[]string]
	// clockSkew is the skew of this process's clock from the PostgreSQL
	// server's that the runner measured, for this config's metrics.
	clockSkew clockSkew
	// notifier delivers notify_deliver jobs to the destinations of the
	// app and of every profile mounted.
	notifier *notify.Deliverer
	// auditRetention is AuditRetention parsed; 0 keeps every row.
	auditRetention time.Duration
	// retention is OrderRetention and CertificateRetention parsed; 0
	// keeps every row of its kind.
	retention authority.Retention
	// flushStop and flushDone stop and await the loop that writes the
	// summaries of refused revocations (see flushRefusals).
	flushStop, flushDone chan struct{}
	// incarnation is this process's registration among those using the
	// store (see orphans.go); orphansStop and orphansDone stop and await
	// the loop that resumes what exited ones left (resumeOrphans).
	incarnation              *incarnation.Registry
	orphansStop, orphansDone chan struct{}

	mu       sync.RWMutex
	profiles map[string]*acmeproxy.Server
	// onOpen are what modules of the config (the web page) do once the
	// store is open, before anything is served; opened says Start has run
	// them.
	onOpen []func(context.Context) error
	opened bool

	// ready is closed when Start has opened the store and started the
	// profiles, or when the app stops without (see awaitStart).
	ready startGate

	// retired is set once the app is stopped or cleaned up: a config
	// whose load failed leaves its app provisioned (and bound to the
	// admin API Caddy kept) but retired, while the old config's app
	// serves on.
	retired atomic.Bool
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "acme_proxy", New: func() caddy.Module { return new(App) }}
}

// dbPool keeps each database open across config reloads: a reload
// provisions the new app before it cleans up the old one, so the usage count
// never drops to zero and the store is not reopened.
var dbPool = caddy.NewUsagePool()

type dbCloser struct{ *store.DB }

func (d dbCloser) Destruct() error {
	createdFiles.forget(d.DB)
	return d.Close()
}

// createdFiles names, by file key (store.SQLiteFileKey), the SQLite files
// an app created when it opened its store at Start, with the dbPool key
// it had: its path, since the file did not exist at Provision (which
// creates nothing) and so had no file key. A later app (a reload) naming
// the file, by that path or by another name (a hard link made since, a
// symlink), finds it there and shares the store, as it shares one keyed
// by the file.
var createdFiles = fileAliases{keys: map[string]string{}}

type fileAliases struct {
	mu   sync.Mutex
	keys map[string]string    // file key -> dbPool key
	of   map[*store.DB]string // the file key each store was recorded under
}

func (f *fileAliases) record(fileKey, poolKey string, db *store.DB) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.of == nil {
		f.of = map[*store.DB]string{}
	}
	f.keys[fileKey] = poolKey
	f.of[db] = fileKey
}

func (f *fileAliases) lookup(fileKey string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.keys[fileKey]
	return k, ok
}

func (f *fileAliases) forget(db *store.DB) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fileKey, ok := f.of[db]; ok {
		delete(f.keys, fileKey)
		delete(f.of, db)
	}
}

// Provision checks the configuration and prepares (or shares) the store
// without writing to it: caddy validate provisions a config and never
// starts it, and must leave no database file created and no schema
// migrated (on a PostgreSQL database the running instances share, the
// schema their binary knows). The store is checked read-only (it can be
// read; its schema is not newer than this binary); Start opens it,
// creating or migrating it.
func (a *App) Provision(ctx caddy.Context) error {
	return a.provision(ctx, ctx.Logger())
}

func (a *App) provision(ctx caddy.Context, log *zap.Logger) error {
	a.log = log
	a.profiles = map[string]*acmeproxy.Server{}
	a.ready = newStartGate()
	var err error
	if a.auditRetention, err = parseRetention("audit_retention", a.AuditRetention, acmeproxy.DefaultAuditRetention, 0); err != nil {
		return err
	}
	if a.retention.Orders, err = parseRetention("order_retention", a.OrderRetention, acmeproxy.DefaultOrderRetention, 0); err != nil {
		return err
	}
	if a.retention.Certificates, err = parseRetention("certificate_retention", a.CertificateRetention, acmeproxy.DefaultCertificateRetention,
		// A revoked certificate stays on the CRLs this long past its
		// notAfter (RFC 5280 §3.3); its ledger row must outlive that.
		authority.CRLKeepsExpired); err != nil {
		return err
	}
	key, prepareDB, err := a.database()
	if err != nil {
		return err
	}
	a.dbKey = key
	val, _, err := dbPool.LoadOrNew(a.dbKey, func() (caddy.Destructor, error) {
		db, err := prepareDB()
		if err != nil {
			return nil, err
		}
		if err := db.Check(ctx); err != nil {
			db.Close()
			return nil, err
		}
		return dbCloser{db}, nil
	})
	if err != nil {
		a.dbKey = ""
		return fmt.Errorf("database: %w", err)
	}
	a.db = val.(dbCloser).DB
	a.queue = jobs.NewQueue(a.db, nil)
	a.notifier = notify.NewDeliverer(notify.Options{Logger: a.log.Named("notify")})
	if a.Notify, err = expandNotify(a.Notify); err != nil {
		return err
	}
	if err := a.notifier.Register(a.Notify...); err != nil {
		return err
	}
	if err := registerProxyMetrics(ctx.GetMetricsRegistry(), a.db, a.crlIssuersInService, &a.clockSkew); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// database says which store the app uses: a key naming it in dbPool (it
// may hold the DSN's password: it is never logged) and how to prepare it
// (store.DB: closed until Start opens it). Its errors name the key and
// never quote the DSN.
func (a *App) database() (string, func() (*store.DB, error), error) {
	if a.Postgres != "" {
		if a.Database != "" {
			return "", nil, errors.New("database: set either database (a SQLite file) or postgres, not both")
		}
		repl := caddy.NewReplacer()
		// An empty DSN is libpq's defaults (a local unix socket, the
		// user's name): never what a DSN made of an unset {env.X} meant.
		if strings.TrimSpace(repl.ReplaceKnown(a.Postgres, "")) == "" {
			return "", nil, errors.New("database postgres: the DSN is empty after its placeholders were replaced (is its environment variable set?)")
		}
		// Nor is a password, a host or a user of nothing.
		dsn, err := expandRequired(repl, "database postgres", a.Postgres)
		if err != nil {
			return "", nil, err
		}
		a.incarnation = incarnationIn(a.incarnationDir(""))
		return "postgres:" + dsn, func() (*store.DB, error) {
			return store.PreparePostgres(dsn, store.PostgresOptions{})
		}, nil
	}
	if a.Database == "" {
		a.Database = filepath.Join(caddy.AppDataDir(), "acme_proxy", "acme_proxy.db")
	}
	// Placeholders ({env.ACME_DB_DIR}/acme_proxy.db) are replaced, as in
	// the DSN; one that is empty fails rather than name another file
	// (/acme_proxy.db), and none is left for the store to create a file
	// literally named {env.X}.
	name, err := expandRequired(caddy.NewReplacer(), "database", a.Database)
	if err != nil {
		return "", nil, err
	}
	path, err := resolvedPath(name)
	if err != nil {
		return "", nil, fmt.Errorf("database: the SQLite file %s: %w", name, err)
	}
	// Keyed by the file, not the path: names no path resolution joins (a
	// hard link, a bind mount) name one file too, and two stores on it
	// would be two single writers, each with its own group commit and
	// caches. A file that does not exist yet is keyed by its path until
	// Start creates it (Provision creates nothing), and then found by its
	// file key in createdFiles.
	file, exists, err := store.SQLiteFileKey(path)
	if err != nil {
		return "", nil, fmt.Errorf("database: %w", err)
	}
	a.incarnation = incarnationIn(a.incarnationDir(path))
	key := "sqlite:" + file
	if !exists {
		key = "sqlite-path:" + path
		a.newFile = path
	} else if k, ok := createdFiles.lookup(file); ok {
		key = k
	}
	return key, func() (*store.DB, error) {
		return store.PrepareSQLite(path, store.SQLiteOptions{})
	}, nil
}

// resolvedPath is the file path p names, absolute and without symlinks:
// the path the store opens, and, where the system gives no file identity
// (see store.SQLiteFileKey), its key in dbPool. Where the file, or
// directories above it, do not exist yet (or a name above it is a file,
// which the store's Check reports), the deepest existing one is resolved
// and the rest appended. p is not cleaned first: a/../b is b
// in the directory a's target sits in, as the system opens it, not b
// beside a.
func resolvedPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		p = wd + string(filepath.Separator) + p
	}
	head, rest := p, ""
	for {
		resolved, err := filepath.EvalSymlinks(head)
		if err == nil {
			return filepath.Join(resolved, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", err
		}
		parent := filepath.Dir(head)
		if parent == head {
			return filepath.Clean(p), nil
		}
		rest = filepath.Join(filepath.Base(head), rest)
		head = parent
	}
}

// parseRetention reads a retention setting, key: a positive duration in
// Caddy's syntax, "keep" (0: never sweep), or "" for def.
func parseRetention(key, v string, def, least time.Duration) (time.Duration, error) {
	switch v {
	case "":
		return def, nil
	case acmeproxy.AuditRetentionKeep:
		return 0, nil
	}
	d, err := apcaddyfile.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration or %q: %w", key, v, acmeproxy.AuditRetentionKeep, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s: %q must be positive", key, v)
	}
	if d < least {
		short := strings.TrimSuffix(strings.TrimSuffix(least.String(), "0s"), "0m") // 24h, not 24h0m0s
		return 0, fmt.Errorf("%s: %q is shorter than %s, which a revoked certificate stays on the CRLs past its notAfter", key, v, short)
	}
	return d, nil
}

// profileNotify returns a profile's notification destinations — its own
// (placeholders already replaced), scoped to the profile so that its
// secrets may differ from another list's for the same receiver, else the
// app's — and makes them deliverable.
func (a *App) profileNotify(profile string, own []notify.Destination) ([]notify.Destination, error) {
	if len(own) == 0 {
		return a.Notify, nil
	}
	own = slices.Clone(own)
	for i := range own {
		own[i].Scope = profile
	}
	if err := a.notifier.Register(own...); err != nil {
		return nil, err
	}
	return own, nil
}

// expandNotify replaces known placeholders ({env.HOOK_SECRET}) in the
// settings of destinations that may hold secrets or differ per host. A
// placeholder of the url, the secret, the smtp server or helo, a header,
// a script's command or one of its arguments that is empty (its variable
// unset) fails the load, naming the setting: an empty secret would send
// every webhook unsigned, and the others would be refused, go nowhere, or
// run the script without its token, found out only at the first
// delivery. (A script's stderr is shown with its arguments, as run,
// redacted: a token from a placeholder is covered.) The username and
// password are replaced as they are, since both empty means no
// authentication (the email destination's own check refuses one without
// the other).
func expandNotify(ds []notify.Destination) ([]notify.Destination, error) {
	if len(ds) == 0 {
		return ds, nil
	}
	repl := caddy.NewReplacer()
	var err error
	expand := func(d notify.Destination, key, v string) string {
		out, rerr := expandRequired(repl, "notify "+d.Type+": "+key, v)
		if rerr != nil && err == nil {
			err = rerr
		}
		return out
	}
	out := make([]notify.Destination, len(ds))
	for i, d := range ds {
		d.URL = expand(d, "url", d.URL)
		d.Secret = expand(d, "secret", d.Secret)
		d.SMTP = expand(d, "smtp", d.SMTP)
		d.HELO = expand(d, "helo", d.HELO)
		d.Username = repl.ReplaceKnown(d.Username, "")
		d.Password = repl.ReplaceKnown(d.Password, "")
		d.Command = expand(d, "command", d.Command)
		if len(d.Args) > 0 {
			d.WrittenArgs = d.Args
			args := make([]string, len(d.Args))
			for j, a := range d.Args {
				args[j] = expand(d, "arg "+strconv.Itoa(j+1), a)
			}
			d.Args = args
		}
		if len(d.Headers) > 0 {
			h := make(map[string]string, len(d.Headers))
			for k, v := range d.Headers {
				h[k] = expand(d, "header "+k, v)
			}
			d.Headers = h
		}
		out[i] = d
	}
	return out, err
}

// expandRequired replaces the known placeholders ({env.X}, {file.path})
// of v, the value of key, one that holds a secret or a value its setting
// cannot do without: a placeholder that is empty (its variable unset, its
// file missing) fails, naming key and the placeholder, never a value.
func expandRequired(repl *caddy.Replacer, key, v string) (string, error) {
	out, err := repl.ReplaceOrErr(v, true, false)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return out, nil
}

// Start opens the store (creating or migrating it), starts the profiles
// on it, and starts the job runner.
func (a *App) Start() error {
	if err := a.openStore(context.Background()); err != nil {
		a.ready.open(false)
		return err
	}
	handlers := []jobs.Handler{
		authority.ValidationJobs(a, a.db, clock.Real()),
		jobs.NewSweep(a.queue, 7*24*time.Hour, time.Hour),
		&jobs.Periodic{Name: "nonce_sweep", Every: 10 * time.Minute, Do: func(ctx context.Context) error {
			_, err := a.db.PruneNonces(ctx, time.Now())
			return err
		}},
		// Rate limit buckets that are full again (the same as no row),
		// in batches that each hold the writer briefly.
		&jobs.Periodic{Name: "rate_limit_sweep", Every: 10 * time.Minute, Do: func(ctx context.Context) error {
			const batch = 1000
			for range 100 {
				n, err := a.db.PruneLimits(ctx, time.Now(), batch)
				if err != nil || n < batch || ctx.Err() != nil {
					return err
				}
			}
			return nil
		}},
		// The rows of prunes whose process ended part way, and audit
		// rows past their retention, in small batches.
		&jobs.Periodic{Name: authority.AuditSweepKind, Every: time.Hour, Do: func(ctx context.Context) error {
			_, err := authority.SweepAudit(ctx, a.db, a.auditRetention, time.Now())
			return err
		}},
		// Dead orders, long-expired certificates and the deactivated
		// accounts they leave empty, of every profile, in small batches.
		&jobs.Periodic{Name: authority.RetentionSweepKind, Every: time.Hour, Do: func(ctx context.Context) error {
			p, err := authority.SweepRetention(ctx, a.db, a.retention, time.Now())
			if p.Any() {
				a.log.Info("retention sweep", zap.String("event", acme.EventRetentionPruned), zap.Int64("orders", p.Orders),
					zap.Int64("certificates", p.Certificates), zap.Int64("accounts", p.Accounts),
					zap.Int("batches", p.Batches), zap.Duration("longest_batch", p.LongestBatch))
			}
			return err
		}},
		// Orders a crash left between claim and certificate are resumed
		// by whichever instance mounts their profile.
		&jobs.Periodic{Name: "order_resume", Every: authority.ResumeEvery, Do: func(ctx context.Context) error {
			var errs []error
			for _, au := range a.authorities() {
				if _, err := au.ResumeStuckOrders(ctx); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}},
	}
	handlers = append(handlers, authority.DelegatedIssueJobs(a, a.log))
	handlers = append(handlers, authority.SignerJobHandlers(a, a.authorities(), a.log)...)
	handlers = append(handlers, authority.RevocationJobHandlers(a, a.authorities, a.db, clock.Real(), a.log)...)
	handlers = append(handlers, a.notifier, authority.NotifyRouteJobs(a))
	lanes := a.signingLanes()
	r, err := jobs.NewRunner(a.queue, measured(handlers), jobs.RunnerOptions{Logger: a.log, Lanes: lanes,
		OnClockReading: a.clockSkew.observe})
	if err != nil {
		return err
	}
	kinds := r.Kinds()
	a.runKinds.Store(&kinds)
	if len(lanes) > 0 {
		// What instances serving these profiles without their signer
		// answer from; the CRL refresh keeps it current.
		if err := authority.PublishAll(context.Background(), a.authorities()); err != nil {
			a.log.Warn("publishing the signers for instances without them; the CRL refresh retries", zap.String("event", "signer_publish_failed"), zap.Error(err))
		}
	}
	if err := r.Start(context.Background()); err != nil {
		return err
	}
	a.runner = r
	a.flushStop, a.flushDone = make(chan struct{}), make(chan struct{})
	go a.flushRefusals(refusalFlushEvery, a.flushStop, a.flushDone)
	if err := a.incarnation.Register(); err != nil {
		a.log.Warn("this process cannot register among those using the store: orders a crash of it leaves processing are resumed after "+
			authority.StuckAfter.String(), zap.String("event", "incarnation_unregistered"), zap.Error(err))
	}
	a.orphansStop, a.orphansDone = make(chan struct{}), make(chan struct{})
	go a.resumeOrphans(a.orphansStop, a.orphansDone)
	started.add(a)
	return nil
}

// openStore opens the store, bringing its schema up to date, then starts
// the profiles' servers and runs the modules' onOpen, and lets the
// handlers serve (awaitStart).
func (a *App) openStore(ctx context.Context) error {
	first := !a.db.IsOpen()
	if err := a.db.Open(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if first {
		a.log.Info("store opened", zap.String("database", a.db.String()))
	}
	if a.newFile != "" {
		file, exists, err := store.SQLiteFileKey(a.newFile)
		if err != nil {
			return fmt.Errorf("database: %w", err)
		}
		if exists {
			createdFiles.record(file, a.dbKey, a.db)
		}
	}
	a.mu.Lock()
	servers := slices.Collect(maps.Values(a.profiles))
	onOpen := a.onOpen
	a.opened = true
	a.mu.Unlock()
	for _, s := range servers {
		if err := s.Start(ctx); err != nil {
			return fmt.Errorf("profile %s: %w", s.Profile(), err)
		}
	}
	for _, f := range onOpen {
		if err := f(ctx); err != nil {
			return err
		}
	}
	a.ready.open(true)
	return nil
}

// whenOpen runs f once the store is open, before anything is served: at
// Start, or now if the app has started.
func (a *App) whenOpen(ctx context.Context, f func(context.Context) error) error {
	a.mu.Lock()
	if !a.opened {
		a.onOpen = append(a.onOpen, f)
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	return f(ctx)
}

// startGate is closed once, saying whether the app started.
type startGate struct {
	once *sync.Once
	done chan struct{}
	ok   *atomic.Bool
}

func newStartGate() startGate {
	return startGate{once: new(sync.Once), done: make(chan struct{}), ok: new(atomic.Bool)}
}

func (g startGate) open(ok bool) {
	if g.once == nil {
		return // never provisioned
	}
	g.once.Do(func() {
		g.ok.Store(ok)
		close(g.done)
	})
}

// awaitStart waits until the app has opened the store and started its
// profiles, or has stopped without, or ctx ends; it reports whether the
// app started. Caddy starts a config's apps in no set order, so the http
// app may take requests before this one has migrated the store: the
// handlers wait here for it, as nothing was served before the store was
// migrated when Provision migrated it.
func (a *App) awaitStart(ctx context.Context) bool {
	select {
	case <-a.ready.done:
		return a.ready.ok.Load()
	default:
	}
	select {
	case <-a.ready.done:
		return a.ready.ok.Load()
	case <-ctx.Done():
		return false
	}
}

// startedApps are the started, not yet stopped acme_proxy apps, oldest
// first, for the admin API when its config's app is not the one serving:
// a config that does not name the app (a handler pulled it in; Caddy
// provisions admin modules before any app, so the admin API cannot find
// it), or a reload that failed after Caddy installed its admin API (the
// old config's app serves on). A reload starts the new config's app
// before it stops the old one's, so the newest is the one to serve.
type startedApps struct {
	mu   sync.Mutex
	apps []*App
}

var started startedApps

func (s *startedApps) add(a *App) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps = append(s.apps, a)
}

func (s *startedApps) remove(a *App) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps = slices.DeleteFunc(s.apps, func(b *App) bool { return b == a })
}

// newest is the app started last of those still running; nil for none.
func (s *startedApps) newest() *App {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.apps) == 0 {
		return nil
	}
	return s.apps[len(s.apps)-1]
}

// signingLanes are the job lanes this instance's runner serves: the
// SigningLane of every profile it mounts with its real signer, and
// AnySignerLane when there is one. A profile mounted with signer delegated
// adds none, so the work only its signer can do is never claimed here.
func (a *App) signingLanes() []string {
	var lanes []string
	for _, au := range a.authorities() {
		if l := au.SigningLane(); l != "" {
			lanes = append(lanes, l)
		}
	}
	if len(lanes) == 0 {
		return nil
	}
	slices.Sort(lanes)
	return append(lanes, signer.AnySignerLane)
}

// refusalFlushEvery is how often the app writes the summaries of refused
// revocations whose interval has ended (authority.RefusalInterval).
const refusalFlushEvery = time.Minute

// flushRefusals writes, every tick, the summary rows of unauthenticated
// revoke-cert refusals whose interval has ended, and at stop those still
// counting. The counts live in this process's memory, so each instance
// writes its own: this is a loop of the process, not a durable job that
// one instance of many would claim.
func (a *App) flushRefusals(every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			a.flushServers(true)
			return
		case <-t.C:
			a.flushServers(false)
		}
	}
}

func (a *App) flushServers(final bool) {
	for _, au := range a.authorities() {
		func() {
			defer func() {
				if v := recover(); v != nil {
					a.log.Error("writing the summaries of refused revocations panicked", zap.String("event", "audit_write_failed"),
						zap.String("profile", au.Profile()), zap.Any("panic", v))
				}
			}()
			au.FlushRefusals(context.Background(), final)
		}()
	}
}

// Stop writes the pending summaries of refused revocations, then stops
// the runner and waits for its handlers.
func (a *App) Stop() error {
	a.retired.Store(true)
	a.ready.open(false)
	started.remove(a)
	if a.flushStop != nil {
		close(a.flushStop)
		<-a.flushDone
		a.flushStop = nil
	}
	if a.orphansStop != nil {
		close(a.orphansStop)
		<-a.orphansDone
		a.orphansStop = nil
	}
	if a.runner == nil {
		return nil
	}
	return a.runner.Stop()
}

// Cleanup releases this app's use of the store, first writing the
// summaries of refused revocations its profiles still count: Caddy cleans
// modules up in no set order, so a handler's own Cleanup may come after
// the store is closed.
func (a *App) Cleanup() error {
	a.retired.Store(true)
	a.ready.open(false)
	if a.dbKey == "" {
		a.releaseIncarnation()
		return nil
	}
	a.flushServers(true)
	_, err := dbPool.Delete(a.dbKey)
	a.releaseIncarnation()
	return err
}

// releaseIncarnation gives back the app's use of its process's
// registration (see orphans.go), once.
func (a *App) releaseIncarnation() {
	if a.incarnation == nil {
		return
	}
	if err := releaseIncarnation(a.incarnation); err != nil {
		a.log.Warn("ending this process's registration among those using the store", zap.String("event", "incarnation_unregistered"), zap.Error(err))
	}
	a.incarnation = nil
}

// register mounts a profile's server; two handlers may not declare one
// profile.
func (a *App) register(s *acmeproxy.Server) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.profiles[s.Profile()]; dup {
		return fmt.Errorf("profile: %q is declared by two acme_proxy handlers", s.Profile())
	}
	a.profiles[s.Profile()] = s
	return nil
}

func (a *App) unregister(s *acmeproxy.Server) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.profiles[s.Profile()] == s {
		delete(a.profiles, s.Profile())
	}
}

// crlIssuersInService is the set of CAs, by key id, whose CRLs the
// mounted profiles keep publishing: the metrics' CRL gauge reports
// those.
func (a *App) crlIssuersInService(ctx context.Context) (map[string]bool, error) {
	live := map[string]bool{}
	var errs []error
	for _, au := range a.authorities() {
		issuers, err := au.CRLIssuersInService(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		for _, iss := range issuers {
			live[iss.KeyID] = true
		}
	}
	return live, errors.Join(errs...)
}

// authorities are the cores of the mounted profiles.
func (a *App) authorities() []*authority.Authority {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]*authority.Authority, 0, len(a.profiles))
	for _, s := range a.profiles {
		out = append(out, s.Authority())
	}
	return out
}

// Lookup finds a mounted profile's authority; it is how jobs reach their
// profile.
func (a *App) Lookup(profile string) (*authority.Authority, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	s, ok := a.profiles[profile]
	if !ok {
		return nil, false
	}
	return s.Authority(), true
}

// All lists the mounted profiles' authorities (operator.ProfileLister).
func (a *App) All() []*authority.Authority { return a.authorities() }

// Operator returns the operator operations over this app's store, queue
// and profiles, for the admin API.
func (a *App) Operator() *operator.Operator {
	return &operator.Operator{DB: a.db, Queue: a.queue, Profiles: a, RunKinds: a.runnerKinds}
}

// runnerKinds lists the kinds of job this app's runner handles; nil
// before Start.
func (a *App) runnerKinds() []string {
	if k := a.runKinds.Load(); k != nil {
		return *k
	}
	return nil
}

var errNoApp = errors.New("the acme_proxy app is not loaded")

// Interface guards
var (
	_ caddy.App              = (*App)(nil)
	_ caddy.Provisioner      = (*App)(nil)
	_ caddy.CleanerUpper     = (*App)(nil)
	_ authority.Profiles     = (*App)(nil)
	_ operator.ProfileLister = (*App)(nil)
)
