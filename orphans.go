package caddyacmeproxy

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/internal/incarnation"
)

// incarnations are this process's registrations (package incarnation),
// one per directory: every app of the process (a reload's old and new)
// on one store shares its store's.
var incarnations = struct {
	mu   sync.Mutex
	of   map[string]*incarnation.Registry
	refs map[string]int // the apps using each (see releaseIncarnation)
}{of: map[string]*incarnation.Registry{}, refs: map[string]int{}}

// incarnationKeep is how long the file of an incarnation found exited is
// kept: by then every order it left processing was resumed by the resume
// sweep, by whichever instance mounts its profile, were it not earlier.
const incarnationKeep = authority.StuckAfter + 2*authority.ResumeEvery

// incarnationIn is this process's registry in dir, for one more app;
// releaseIncarnation gives it back.
func incarnationIn(dir string) *incarnation.Registry {
	incarnations.mu.Lock()
	defer incarnations.mu.Unlock()
	r := incarnations.of[dir]
	if r == nil {
		r = incarnation.New(dir, incarnationKeep)
		incarnations.of[dir] = r
	}
	incarnations.refs[dir]++
	return r
}

// releaseIncarnation gives back an app's use of r; the last app of the
// process using its directory ends the registration (its file removed),
// as a process that exits does: the store is closed, nothing of this
// process works on its orders any more.
func releaseIncarnation(r *incarnation.Registry) error {
	incarnations.mu.Lock()
	defer incarnations.mu.Unlock()
	dir := r.Dir()
	if incarnations.of[dir] != r {
		return nil
	}
	if incarnations.refs[dir]--; incarnations.refs[dir] > 0 {
		return nil
	}
	delete(incarnations.of, dir)
	delete(incarnations.refs, dir)
	return r.Close()
}

// incarnationDir is where the processes using the app's store register:
// beside a SQLite file (as its -wal and -shm are), so that every process
// on the file, and the next one after a crash, looks in one place; for
// PostgreSQL, in Caddy's data directory, where the processes of one host
// that share it look (another host's are never judged).
func (a *App) incarnationDir(sqlitePath string) string {
	if sqlitePath != "" {
		return sqlitePath + "-incarnations"
	}
	return filepath.Join(caddy.AppDataDir(), "acme_proxy", "incarnations")
}

// resumeOrphans resumes, at once and then every ResumeEvery until stop
// closes, the orders the exited processes of this host left processing
// (authority.ResumeOrphanedOrders): a finalize cut by a crash is finished
// by the restarted process without waiting authority.StuckAfter.
func (a *App) resumeOrphans(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(authority.ResumeEvery)
	defer t.Stop()
	for {
		if err := a.resumeOrphansOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("resuming the orders of exited processes; the next round, or the resume sweep, tries again",
				zap.String("event", "order_resume_failed"), zap.Error(err))
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (a *App) resumeOrphansOnce(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			a.log.Warn("resuming the orders of exited processes panicked; the next round, or the resume sweep, tries again", zap.String("event", "order_resume_failed"), zap.Any("panic", v))
		}
	}()
	exited, err := a.incarnation.Exited()
	if len(exited) == 0 {
		return err
	}
	errs := []error{err}
	for _, au := range a.authorities() {
		if _, err := au.ResumeOrphanedOrders(ctx, exited); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
