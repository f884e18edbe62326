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
