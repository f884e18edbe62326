package pgtest

import (
	"database/sql"
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestEachTestGetsAnEmptyDatabaseOfItsOwn(t *testing.T) {
	a, b := DSN(t), DSN(t)
	if a == b {
		t.Fatalf("two calls gave one database: %s", a)
	}
	for _, dsn := range []string{a, b} {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s: %d tables, err %v; want an empty database", dsn, n, err)
		}
		if _, err := db.Exec(`CREATE TABLE mine (x INT)`); err != nil {
			t.Fatal(err)
		}
	}
}

func TestADatabaseOutlivesARestartOfTheCluster(t *testing.T) {
	db, err := sql.Open("pgx", DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE kept (x INT); INSERT INTO kept VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	Stop(t)
	if err := db.Ping(); err == nil {
		t.Error("the cluster answered while stopped")
	}
	Start(t)
	var x int
	if err := db.QueryRow(`SELECT x FROM kept`).Scan(&x); err != nil || x != 7 {
		t.Errorf("after the restart: %d, %v; want the row written before", x, err)
	}
}

// ServerCPU counts the work of a backend serving a connection: a query
// that keeps one busy for a while shows in it, by about its duration.
func TestTheClusterCPUCountsTheBackendsWork(t *testing.T) {
	db, err := sql.Open("pgx", DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	before, err := ServerCPU()
	if err != nil {
		t.Fatal(err)
	}
	var took float64
	if err := db.QueryRow(`SELECT (extract(epoch FROM clock_timestamp()) - extract(epoch FROM now())) * 1000
		FROM (SELECT sum(i) FROM generate_series(1, 3000000) i) s`).Scan(&took); err != nil {
		t.Fatal(err)
	}
	after, err := ServerCPU()
	if err != nil {
		t.Fatal(err)
	}
	// The query's own wall time bounds its CPU from above; ticks of 10 ms
	// and other backends' work allow some slack either way.
	if used := (after - before).Seconds() * 1000; used < took/4-20 || used <= 0 {
		t.Fatalf("the cluster's CPU grew by %.0f ms over a query that ran %.0f ms; want about that", used, took)
	}
}
