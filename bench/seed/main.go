// Command seed fills an acme_proxy database with a realistic history, so
// that a server can be measured with a large database:
//
//	go run ./bench/seed -db /var/lib/caddy/acme_proxy.db -profile bench -orders 1000000
//	go run ./bench/seed -postgres "postgres://…" -profile bench -orders 200000 \
//		-revoked 100000 -issuer <the CA's key id>
//
// It writes accounts (one per ten orders), issued orders with one or three
// names (each name ordered three times, as renewals do), their
// authorizations and challenges (three types, one valid), their
// certificates and, with -revoked, revocations listed on the CRL of
// -issuer (the hex subject key identifier of the issuing CA, as leaves
// name it in their authority key identifier), in writes of -batch orders
// through the store (the schema is migrated first). Stop the server first
// on SQLite, or let it run: the writes take the database's write lock a
// batch at a time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/seed"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func main() {
	var (
		path     = flag.String("db", "", "SQLite database file")
		dsn      = flag.String("postgres", "", "PostgreSQL connection string (instead of -db)")
		profile  = flag.String("profile", "", "the profile the orders belong to")
		orders   = flag.Int("orders", 200000, "issued orders to write")
		revoked  = flag.Int("revoked", 0, "how many of their certificates to revoke")
		issuer   = flag.String("issuer", "", "key id of the CA whose CRL lists the revocations")
		perAcct  = flag.Int("orders-per-account", 10, "orders per account")
		batch    = flag.Int("batch", 5000, "orders per write")
		zoneName = flag.String("zone", "seed.example.com", "DNS zone of the names")
	)
	flag.Parse()
	if err := run(*path, *dsn, seed.Options{Profile: *profile, Orders: *orders, Revoked: *revoked, IssuerKeyID: *issuer,
		OrdersPerAccount: *perAcct, Batch: *batch, Zone: *zoneName}); err != nil {
		fmt.Fprintln(os.Stderr, "seed:", err)
		os.Exit(1)
	}
}

func run(path, dsn string, o seed.Options) error {
	ctx := context.Background()
	var (
		db  *store.DB
		err error
	)
	switch {
	case dsn != "" && path == "":
		db, err = store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
	case path != "" && dsn == "":
		db, err = store.OpenSQLite(ctx, path, store.SQLiteOptions{})
	default:
		return fmt.Errorf("give one of -db and -postgres")
	}
	if err != nil {
		return err
	}
	defer db.Close()
	start := time.Now()
	o.Progress = func(done int) {
		fmt.Fprintf(os.Stderr, "\r%d orders (%.0f/s)", done, float64(done)/time.Since(start).Seconds())
	}
	s, err := seed.Run(ctx, db, o)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	fmt.Printf("seeded %d orders (%d revoked) in %v\n", o.Orders, o.Revoked, time.Since(start).Round(time.Millisecond))
	fmt.Printf("sample: identifier=%s account=%s serial=%s order=%s\n", s.Identifier, s.AccountID, s.Serial, s.OrderID)
	return nil
}
