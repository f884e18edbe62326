// Package incarnation tells the processes that registered in a directory
// and still run apart from those that have exited, by a lock the system
// holds for a process exactly as long as it lives: each process (an
// incarnation: a restart is a new one) creates a file named after its id
// in the directory and holds an exclusive flock on it until it exits —
// kill -9 included, since the kernel drops a dead process's locks. A lock
// another process can take is an exited incarnation's.
//
// The proof covers the processes of one host (one kernel) on a local file
// system: an incarnation is never said to have exited while it runs, and
// one whose file is in another host's directory is never said anything
// of. Where the system has no flock (Windows), no incarnation is ever
// said to have exited.
package incarnation

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrUnsupported is Register's error where the system has no flock.
var ErrUnsupported = errors.New("incarnation: no file locks on this system")

const suffix = ".lock"

// Registry is this process's registration in one directory.
type Registry struct {
	dir  string
	keep time.Duration
	once sync.Once
	self string
	// file holds the lock for the life of the process: it is never
	// closed (a collected *os.File would close its descriptor, and so
	// drop the lock, so the Registry keeps it).
	file *os.File
	err  error

	mu sync.Mutex
	// exited is when Exited first found each incarnation exited.
	exited map[string]time.Time
}

// New is the registry of dir; nothing is written before Register. The
// file of an incarnation Exited found exited is removed keep later (the
// caller's claims of it are settled by then by other means).
func New(dir string, keep time.Duration) *Registry {
	return &Registry{dir: dir, keep: keep, exited: map[string]time.Time{}}
}

// Dir is the registry's directory.
func (r *Registry) Dir() string { return r.dir }

// Register registers this process in the directory (creating it), once;
// later calls return the first one's error. The file is locked under a
// name no one looks at, then renamed: another process never sees it
// unlocked.
func (r *Registry) Register() error {
	r.once.Do(func() {
		r.err = r.register()
	})
	return r.err
}

func (r *Registry) register() error {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("incarnation: %w", err)
	}
	host, _ := os.Hostname()
	// The id names the host and process for an operator reading the
	// orders table; the random part makes it one incarnation's.
	id := fmt.Sprintf("%s:%d:%s", clean(host), os.Getpid(), hex.EncodeToString(b[:]))
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return fmt.Errorf("incarnation: %w", err)
	}
	tmp := filepath.Join(r.dir, "."+hex.EncodeToString(b[:])+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("incarnation: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(r.dir, fileName(id))); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("incarnation: %w", err)
	}
	r.mu.Lock()
	r.self, r.file = id, f
	r.mu.Unlock()
	return nil
}

// Self is this process's id, "" before a successful Register and after
// Close.
func (r *Registry) Self() string {
	if r.Register() != nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.self
}

// Close ends the registration, for a process that no longer uses the
// store: its file is removed, then its lock let go. Nothing it claimed is
// being worked on any more, so another process finding it exited is
// right. Register does nothing after Close.
func (r *Registry) Close() error {
	r.once.Do(func() { r.err = errors.New("incarnation: closed") })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == nil {
		return nil
	}
	err := os.Remove(filepath.Join(r.dir, fileName(r.self)))
	r.file.Close()
	r.file, r.self = nil, ""
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("incarnation: %w", err)
	}
	return nil
}

// Exited lists the incarnations registered in the directory whose process
// has exited: those whose lock can be taken (it is let go at once). This
// process is never among them. The files of those it first found exited
// more than the registry's keep ago are removed.
func (r *Registry) Exited() ([]string, error) {
	if r.Register() != nil {
		return nil, nil
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("incarnation: %w", err)
	}
	self := r.Self()
	var out []string
	for _, e := range entries {
		id, ok := idOf(e.Name())
		if !ok || id == self {
			continue
		}
		exited, err := r.probe(id, func(*os.File) error { return nil })
		if err != nil {
			return out, err
		}
		if exited {
			out = append(out, id)
		}
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	seen := make(map[string]time.Time, len(out))
	for _, id := range out {
		first, ok := r.exited[id]
		if !ok {
			first = now
		}
		if now.Sub(first) > r.keep {
			errs = append(errs, r.forget(id))
			continue
		}
		seen[id] = first
	}
	r.exited = seen
	return out, errors.Join(errs...)
}

// forget removes an exited incarnation's file; nothing if it still runs
// (or is gone).
func (r *Registry) forget(id string) error {
	if id == r.self || strings.ContainsAny(id, `/\`) {
		return nil
	}
	_, err := r.probe(id, func(f *os.File) error {
		// Removed while locked: another prober that opened it before
		// takes the lock of a file no name leads to, and finds the
		// same.
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("incarnation: %w", err)
		}
		return nil
	})
	return err
}

// probe takes id's lock if it can and runs do while holding it; exited
// reports whether it could.
func (r *Registry) probe(id string, do func(*os.File) error) (exited bool, err error) {
	f, err := os.OpenFile(filepath.Join(r.dir, fileName(id)), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("incarnation: %w", err)
	}
	defer f.Close() // lets the lock go
	took, err := tryLock(f)
	if err != nil || !took {
		return false, err
	}
	return true, do(f)
}

// fileName is id's file: the id with its separators kept, as no host
// name or number holds a slash.
func fileName(id string) string { return id + suffix }

func idOf(name string) (string, bool) {
	if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, suffix) {
		return "", false
	}
	return strings.TrimSuffix(name, suffix), true
}

// clean keeps a host name to the characters a file name can hold
// anywhere.
func clean(host string) string {
	if host == "" {
		return "host"
	}
	return strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' {
			return c
		}
		return '_'
	}, host)
}
