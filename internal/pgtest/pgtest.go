// Package pgtest gives tests a throwaway PostgreSQL: one cluster per test
// binary, started on first use (initdb and pg_ctl in a temporary directory,
// listening only on a unix socket there), one fresh database per test, and
// the cluster stopped and removed when the binary's tests are done (Main).
//
// Without PostgreSQL's binaries a test that asks for a database skips with
// a message, and fails instead under ACMEPROXY_E2E=1, where CI must run it.
//
// ACMEPROXY_PGTEST_OPTS adds server options to the cluster's (for a look
// inside PostgreSQL during a benchmark, e.g. "-c
// shared_preload_libraries=pg_stat_statements").
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// Main runs m's tests and then stops the cluster if one was started. A
// package using DSN calls it from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if err := Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shutdown stops and removes the cluster if one was started: Main's end,
// for a TestMain that must stop what uses the cluster first.
func Shutdown() error {
	if c := started.Swap(nil); c != nil {
		return c.stop()
	}
	return nil
}

// Durable, set before the cluster starts, keeps PostgreSQL's fsync on:
// for a benchmark, which must pay for durability as production does.
var Durable bool

// ErrNoPostgres: this machine has no PostgreSQL server binaries.
var ErrNoPostgres = errNoPostgres

// ProcessDSN is DSN for a database that lives as long as the cluster,
// for a fixture that outlives any one test or benchmark (Shutdown removes
// it with the cluster). Without PostgreSQL it returns ErrNoPostgres.
func ProcessDSN() (string, error) {
	once.Do(func() { cl, clErr = start() })
	if clErr != nil {
		return "", clErr
	}
	name := fmt.Sprintf("p%d", dbSeq.Add(1))
	if _, err := cl.admin.Exec(`CREATE DATABASE ` + name); err != nil {
		return "", fmt.Errorf("pgtest: creating database %s: %w", name, err)
	}
	return cl.dsn(name), nil
}

var (
	once    sync.Once
	started atomic.Pointer[cluster]
	cl      *cluster
	clErr   error
	dbSeq   atomic.Int64
)

// DSN creates a fresh, empty database in the binary's cluster and returns
// a key=value connection string for it. The database is dropped when t
// ends.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(func() { cl, clErr = start() })
	if clErr != nil {
		if errors.Is(clErr, errNoPostgres) && os.Getenv("ACMEPROXY_E2E") != "1" {
			t.Skipf("pgtest: %v (install PostgreSQL to run this test; under ACMEPROXY_E2E=1 this fails)", clErr)
		}
		t.Fatalf("pgtest: %v", clErr)
	}
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	if _, err := cl.admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := cl.admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return cl.dsn(name)
}

var errNoPostgres = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) found")

type cluster struct {
	dir    string   // holds data/ and the socket
	asUser []string // command prefix running PostgreSQL's tools as a non-root user
	bin    string
	opts   string // the server's -o options
	admin  *sql.DB
}

func (c *cluster) dsn(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", c.dir, db)
}

// binDir finds a directory holding initdb and pg_ctl: PATH first, then
// Debian's /usr/lib/postgresql/<version>/bin, newest version first.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	vers, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(vers, func(i, j int) bool { return pgVersion(vers[i]) > pgVersion(vers[j]) })
	for _, p := range vers {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	return "", errNoPostgres
}

func pgVersion(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

func start() (*cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	// The socket path must stay short (unix sockets allow ~107 bytes).
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, bin: bin}
	// initdb refuses to run as root: then run the cluster as the
	// postgres user that Debian's package creates.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and no postgres user to run the cluster as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	// fsync off: a test cluster need not survive a power loss, and CI's
	// disk is slow (unless Durable). Everything else is PostgreSQL's
	// default.
	c.opts = "-c listen_addresses='' -c unix_socket_directories=" + dir + " -c max_connections=200"
	if !Durable {
		c.opts += " -c fsync=off"
	}
	// A benchmark's look inside PostgreSQL, e.g. "-c
	// shared_preload_libraries=pg_stat_statements": options appended to
	// the server's, after (and so over) the ones above.
	if extra := os.Getenv("ACMEPROXY_PGTEST_OPTS"); extra != "" {
		c.opts += " " + extra
	}
	if out, err := c.serverStart(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	started.Store(c)
	c.watch()
	c.admin, err = sql.Open("pgx", c.dsn("postgres"))
	if err == nil {
		err = c.admin.PingContext(context.Background())
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connecting to the test cluster: %w", err), c.stop())
	}
	return c, nil
}

func (c *cluster) serverStart() ([]byte, error) {
	return c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-o", c.opts, "-l", filepath.Join(c.dir, "log"), "-w", "-s", "start")
}

// Stop stops the binary's cluster as an operator's restart does (a fast
// shutdown: sessions are cut, transactions in flight roll back), for a
// test of what clients see while the database is away; Start brings it
// back. The databases DSN made survive. Tests that stop the cluster must
// not run in parallel with other tests of the binary using it.
func Stop(t testing.TB) {
	t.Helper()
	if cl == nil {
		t.Fatal("pgtest: Stop before DSN started the cluster")
	}
	if out, err := cl.run("pg_ctl", "-D", filepath.Join(cl.dir, "data"), "-m", "fast", "-w", "-s", "stop"); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts the cluster that Stop stopped.
func Start(t testing.TB) {
	t.Helper()
	if cl == nil {
		t.Fatal("pgtest: Start before DSN started the cluster")
	}
	if out, err := cl.serverStart(); err != nil {
		t.Fatalf("pgtest: pg_ctl start: %v\n%s", err, out)
	}
}

// WALPosition is where db's cluster is inserting into its write-ahead
// log, in bytes: its difference over a benchmark's part is the WAL the
// part wrote, a count the machine's load does not move.
func WALPosition(db *sql.DB) (int64, error) {
	var lsn int64
	if err := db.QueryRow(`SELECT CAST(pg_current_wal_insert_lsn() - '0/0' AS BIGINT)`).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("pgtest: the WAL position: %w", err)
	}
	return lsn, nil
}

// ServerCPU is the user and system CPU the binary's cluster has used so
// far: its postmaster's own, its children's that have exited (which the
// kernel adds to the postmaster's when it reaps them), and every live
// child's — the backends serving connections and PostgreSQL's background
// processes — read from /proc (Linux). A benchmark takes it before and
// after its timed part for PostgreSQL's share of the work. It fails when
// no cluster was started.
func ServerCPU() (time.Duration, error) {
	c := started.Load()
	if c == nil {
		return 0, errors.New("pgtest: no cluster started")
	}
	postmaster, err := c.postmaster()
	if err != nil {
		return 0, err
	}
	st, err := procStat(postmaster)
	if err != nil {
		return 0, fmt.Errorf("pgtest: the postmaster's CPU: %w", err)
	}
	ticks := st.utime + st.stime + st.cutime + st.cstime
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if st, err := procStat(pid); err == nil && st.ppid == int64(postmaster) {
			ticks += st.utime + st.stime // a child gone meanwhile is in cutime next time
		}
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// postmaster is the pid of the cluster's postmaster.
func (c *cluster) postmaster() (int, error) {
	pidFile, err := os.ReadFile(filepath.Join(c.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgtest: the postmaster's pid: %w", err)
	}
	first, _, _ := strings.Cut(string(pidFile), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("pgtest: the postmaster's pid: %w", err)
	}
	return pid, nil
}

// Freeze stops the binary's cluster without closing anything — SIGSTOP to
// the postmaster and each of its children, as a hung server or a network
// path that drops every packet leaves a client: connections stay open,
// nothing answers. The returned function (also run at the test's end)
// thaws it. Tests that freeze the cluster must not run in parallel with
// other tests of the binary using it.
func Freeze(t testing.TB) (thaw func()) {
	t.Helper()
	c := started.Load()
	if c == nil {
		t.Fatal("pgtest: Freeze before DSN started the cluster")
	}
	postmaster, err := c.postmaster()
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{postmaster}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range procs {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != postmaster {
			if st, err := procStat(pid); err == nil && st.ppid == int64(postmaster) {
				pids = append(pids, pid)
			}
		}
	}
	resume, err := suspend(pids)
	if err != nil {
		t.Fatalf("pgtest: freezing the cluster: %v", err)
	}
	var once sync.Once
	thaw = func() { once.Do(resume) }
	t.Cleanup(thaw)
	return thaw
}

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every
// architecture Linux exports to user space with a fixed value.
const userHZ = 100

// stat is what ServerCPU reads of /proc/<pid>/stat.
type stat struct{ ppid, utime, stime, cutime, cstime int64 }

func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return stat{}, errors.New("/proc/<pid>/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return stat{}, errors.New("/proc/<pid>/stat: too few fields")
	}
	var (
		v    [5]int64
		errs []error
	)
	for k, field := range []int{1, 11, 12, 13, 14} { // ppid, utime, stime, cutime, cstime (fields 4, 14-17)
		n, err := strconv.ParseInt(f[field], 10, 64)
		v[k], errs = n, append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return stat{ppid: v[0], utime: v[1], stime: v[2], cutime: v[3], cstime: v[4]}, nil
}

func (c *cluster) run(tool string, args ...string) ([]byte, error) {
	argv := append(append(append([]string(nil), c.asUser...), filepath.Join(c.bin, tool)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// watch starts a watcher, in a session of its own, that outlives this
// binary: once the binary is gone it stops the cluster and removes its
// directory if they are still there. A binary that dies without Main's
// Shutdown — go test's -timeout panics it, a test panics, a kill — would
// otherwise leave PostgreSQL running, orphaned, and its directory behind.
// After a Shutdown it finds nothing left to do.
func (c *cluster) watch() {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	stop := append(append([]string(nil), c.asUser...), filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "-s", "stop")
	for i, a := range stop {
		stop[i] = q(a)
	}
	script := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 1; done; if [ -d %s ]; then %s; rm -rf %s; fi`,
		os.Getpid(), q(c.dir), strings.Join(stop, " "), q(c.dir))
	cmd := exec.Command("sh", "-c", script)
	detach(cmd)
	if cmd.Start() == nil {
		go cmd.Wait() // reaps it if this binary outlives it
	}
}

func (c *cluster) stop() error {
	if c.admin != nil {
		c.admin.Close()
	}
	out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "-s", "stop")
	rmErr := os.RemoveAll(c.dir)
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	return rmErr
}
