package caddyacmeproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// migrateStore is `caddy acme-proxy migrate-store --from <sqlite file>
// --to <postgres dsn>`: it copies a stopped instance's SQLite store into
// an empty PostgreSQL database (store.CopyStore), offline — it talks to
// no admin API. The DSN may hold Caddy placeholders ({env.PGPASSWORD});
// it is never printed.
func (c *cli) migrateStore(cmd *cobra.Command, _ []string) error {
	from, _ := cmd.Flags().GetString("from")
	to, _ := cmd.Flags().GetString("to")
	if from == "" || to == "" {
		return errors.New("migrate-store: --from <sqlite file> and --to <postgres dsn> are both required")
	}
	if _, err := os.Stat(from); err != nil {
		// Opening would create an empty file in its place.
		return fmt.Errorf("migrate-store: --from: %w", err)
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	// The target first, refused untouched unless it is empty: then a
	// mistyped DSN, a wrong password or a live database changes neither
	// it nor the source (which opening brings to this binary's schema).
	dst, err := store.OpenPostgres(ctx, caddy.NewReplacer().ReplaceKnown(to, ""), store.PostgresOptions{RequireEmpty: true})
	if err != nil {
		return fmt.Errorf("migrate-store: opening the target: %w", err)
	}
	defer dst.Close()
	src, err := store.OpenSQLite(ctx, from, store.SQLiteOptions{})
	if err != nil {
		return fmt.Errorf("migrate-store: opening %s: %w", from, err)
	}
	defer src.Close()
	counts, err := store.CopyStore(ctx, src, dst)
	if err != nil {
		return fmt.Errorf("migrate-store: %w", err)
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TABLE\tSOURCE ROWS\tCOPIED ROWS")
	var total int64
	for _, t := range counts {
		fmt.Fprintf(w, "%s\t%d\t%d\n", t.Table, t.Source, t.Dest)
		total += t.Dest
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "copied %d rows of %d tables from %s to %s; every count matches\n", total, len(counts), src, dst)
	return nil
}
