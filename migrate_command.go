package caddyacmeproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// migrateStore is `caddy acme-proxy migrate-store --from <sqlite file>
// --to <postgres dsn>`: it copies a stopped instance's SQLite store into
// an empty PostgreSQL database (store.CopyStore), offline — it talks to
// no admin API — and refuses a source that looks in use
// (store.SQLiteInUse). The DSN may hold Caddy placeholders ({env.PGPASSWORD}),
// none of which may be empty; it is never printed.
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
	// A placeholder that is empty (its variable unset) would leave
	// libpq's defaults in its place: some other database.
	dsn, err := expandRequired(caddy.NewReplacer(), "migrate-store: --to", to)
	if err != nil {
		return err
	}
	dst, err := store.OpenPostgres(ctx, dsn, store.PostgresOptions{RequireEmpty: true})
	if err != nil {
		return fmt.Errorf("migrate-store: opening the target: %w", err)
	}
	defer dst.Close()
	// A source a running Caddy still writes to would lose, without a
	// word, whatever it wrote after the copy began: refused before the
	// copy, the target left empty. (After the target's check, as reading
	// the source leaves a WAL file by it.)
	use, err := store.SQLiteInUse(ctx, from, time.Now())
	if err != nil {
		return fmt.Errorf("migrate-store: %w", err)
	}
	if use.InUse() {
		return fmt.Errorf("migrate-store: %s is in use: %s; stop Caddy first (what it writes after the copy began would not be copied), then run migrate-store again",
			from, describeUse(use))
	}
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

// describeUse says what SQLiteInUse saw: the process that has the file
// open, and the newest job lease, with when it lapses should its instance
// have crashed (one stopped releases its leases).
func describeUse(u store.SQLiteUse) string {
	var seen []string
	switch {
	case u.OpenBy > 0:
		seen = append(seen, fmt.Sprintf("it is open in process %d", u.OpenBy))
	case u.OpenBy < 0:
		seen = append(seen, "it is open in another process")
	}
	if len(u.Leases) > 0 {
		l := u.Leases[0] // the longest-lasting
		more := ""
		if n := len(u.Leases) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more)", n)
		}
		seen = append(seen, fmt.Sprintf("job %d (%s) is leased to %s until %s%s (a Caddy holds a lease while it runs a job and releases it when it stops; "+
			"if that Caddy crashed, its lease lapses then: run migrate-store again after it)", l.ID, l.Kind, l.Owner, l.Until.UTC().Format(time.RFC3339), more))
	}
	return strings.Join(seen, "; ")
}
