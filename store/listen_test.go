package store

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// A listening connection whose peer goes silent without closing it (a
// host gone, a firewall's or NAT's entry dropped) errs only when TCP
// keepalive gives up, many minutes later; until then other instances'
// enqueues wake nobody here. The watcher asks a quiet connection for a
// round trip, and one that does not answer is replaced: here the
// connection the watcher listens on stops carrying bytes, and only a new
// connection can tell it of the job enqueued afterwards.
func TestAListeningConnectionThatFallsSilentIsReplaced(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		quickListenChecks(t)
		dsn := pgtest.DSN(t)
		p := newSilencer(t, dsn)
		watched := openAt(t, p.dsn)
		other := openAt(t, dsn)

		wakes := watch(t, watched)
		waitWake(t, wakes, "", "the first LISTEN")
		p.silenceAll()
		waitWake(t, wakes, "", "a LISTEN on a new connection after the old one fell silent")

		if _, _, err := other.EnqueueJob(context.Background(), NewJob{Kind: "k", MaxAttempts: 1}, time.Now()); err != nil {
			t.Fatal(err)
		}
		waitWake(t, wakes, "k", "the announcement of a job another instance enqueued")
	})
}

// A quiet connection that answers its round trip is kept: the watcher
// does not reconnect (and wake every kind) each time nothing happens.
func TestAQuietListeningConnectionThatAnswersIsKept(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		quickListenChecks(t)
		db := openAt(t, pgtest.DSN(t))
		wakes := watch(t, db)
		waitWake(t, wakes, "", "the first LISTEN")
		select {
		case k := <-wakes:
			t.Fatalf("the watcher woke %q with nothing enqueued over %d quiet periods: it replaced a connection that answered", k, 10)
		case <-time.After(10 * listenQuiet):
		}
	})
}

// quickListenChecks shortens the watcher's quiet period and its wait for
// an answer for the running test.
func quickListenChecks(t *testing.T) {
	quiet, answer := listenQuiet, listenAnswer
	listenQuiet, listenAnswer = 100*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { listenQuiet, listenAnswer = quiet, answer })
}

// watch runs db.WatchJobs until the test ends and returns what it wakes.
func watch(t *testing.T, db *DB) <-chan string {
	ctx, cancel := context.WithCancel(context.Background())
	wakes := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.WatchJobs(ctx, func(kind string) { wakes <- kind })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return wakes
}

func waitWake(t *testing.T, wakes <-chan string, want, what string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case k := <-wakes:
			if k == want {
				return
			}
		case <-deadline:
			t.Fatalf("no wake-up of %q for %s within 15s", want, what)
		}
	}
}

// silencer stands between a store and the test's PostgreSQL on a unix
// socket of its own. silenceAll makes every connection open at the time
// stop carrying bytes either way while staying open, as a connection
// whose peer vanished does; connections made afterwards work. Its
// connections are closed when the test ends.
type silencer struct {
	dsn string
	mu  sync.Mutex
	on  []*silenceable
}

type silenceable struct {
	mu     sync.Mutex
	silent bool
	ends   [2]net.Conn
}

func (s *silenceable) isSilent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silent
}

// newSilencer listens where dsn's PostgreSQL does, under a directory of
// its own, and returns dsn with its host moved there.
func newSilencer(t *testing.T, dsn string) *silencer {
	t.Helper()
	host := ""
	for _, kv := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(kv, "host="); ok {
			host = v
		}
	}
	if !strings.HasPrefix(host, "/") {
		t.Fatalf("the test cluster's DSN has no socket directory: %q", dsn)
	}
	// A unix socket's path is bounded (108 bytes): keep the directory short.
	dir, err := os.MkdirTemp("", "pgsil")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	s := &silencer{dsn: strings.Replace(dsn, "host="+host, "host="+dir, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, sc := range s.on {
			sc.ends[0].Close()
			sc.ends[1].Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", filepath.Join(host, ".s.PGSQL.5432"))
			if err != nil {
				c.Close()
				continue
			}
			sc := &silenceable{ends: [2]net.Conn{c, up}}
			s.mu.Lock()
			s.on = append(s.on, sc)
			s.mu.Unlock()
			wg.Go(func() { s.pipe(sc, up, c) })
			wg.Go(func() { s.pipe(sc, c, up) })
		}
	})
	return s
}

// pipe copies from src to dst until either closes, dropping what src
// sends once sc is silent.
func (s *silencer) pipe(sc *silenceable, dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !sc.isSilent() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *silencer) silenceAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.on {
		sc.mu.Lock()
		sc.silent = true
		sc.mu.Unlock()
	}
}
