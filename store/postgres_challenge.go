package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// pipeline runs b's statements in order as one transaction, in one round
// trip: pgx sends them as a pipeline closed by a single Sync, which
// PostgreSQL runs as an implicit transaction (committed at the Sync, undone
// whole when a statement fails, the statements after it skipped). At READ
// COMMITTED each statement still takes a snapshot of its own when it
// starts, after the statements before it are done, as in a transaction of
// BEGIN, the statements and COMMIT (three round trips more for two
// statements). read gets the statements' results in order, before the
// commit is known: it must only gather them, and reset what it gathers, as
// the whole pipeline is run again when it loses a race (see retrying).
func (e *postgresEngine) pipeline(ctx context.Context, lazy bool, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	return retrying(ctx, func() error {
		t, err := e.turn(ctx, lazy)
		if err != nil {
			return err
		}
		defer t.leave()
		conn, err := e.pool(lazy).Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		return conn.Raw(func(dc any) error {
			br := dc.(*stdlib.Conn).Conn().SendBatch(ctx, b)
			readErr := read(br)
			return errors.Join(readErr, br.Close())
		})
	})
}

// pgChallengeSettled is the first statement of completeValidChallenge's
// pipeline: the challenge (processing or pending → valid), its
// authorization (pending → valid) and the lock on the authorization's
// order, in that order (each data-modifying WITH reads the one before it),
// as CompleteChallenge takes them. Its row: the authorization (NULL when
// the challenge was not pending or processing), the order (NULL when the
// authorization had been settled meanwhile) and the order's status as
// locked.
const pgChallengeSettled = `WITH ch AS (
		UPDATE challenges SET status = 'valid', validated_at = $1, error = $2, updated_at = $1
		WHERE id = $3 AND status IN ('pending','processing') RETURNING authz_id),
	az AS (
		UPDATE authorizations SET status = 'valid', updated_at = $1
		WHERE id = (SELECT authz_id FROM ch) AND status = 'pending' RETURNING order_id),
	lk AS (SELECT status FROM orders WHERE id = (SELECT order_id FROM az) FOR UPDATE)
	SELECT (SELECT authz_id FROM ch), (SELECT order_id FROM az), (SELECT status FROM lk)`

// pgOrderPromoted is the second: the order of the challenge's
// authorization to ready once every one of its authorizations is valid.
// It runs after the first, whose lock on the order it comes behind, in a
// snapshot of its own: it sees the authorizations of every validation
// that held the lock before. Its guard is the promotion's whole condition
// (the order pending, each authorization valid), which makes it right
// whatever the first statement did; when that changed nothing, it finds
// nothing to do, since a validation that made an order's last
// authorization valid promoted the order itself. The order by its key
// alone (see "Rows read by their key" in dialect.go).
const pgOrderPromoted = `UPDATE orders SET status = 'ready', updated_at = $1
	WHERE id = (SELECT a.order_id FROM challenges c JOIN authorizations a ON a.id = c.authz_id WHERE c.id = $2)
	AND (status = 'pending') IS TRUE
	AND NOT EXISTS (SELECT 1 FROM authorizations WHERE order_id = orders.id AND status <> 'valid')
	RETURNING status`

// completeValidChallenge is CompleteChallenge for a valid result that
// owes no jobs, on PostgreSQL: its transaction's statements (the
// challenge, authorization and order lock in one, then the order's
// promotion) in one round trip instead of six (BEGIN, four statements,
// COMMIT). The locks, their order and the promotion's read after the
// order's lock are CompleteChallenge's.
func (db *DB) completeValidChallenge(ctx context.Context, e *postgresEngine, id string, problem []byte, now time.Time) (ChallengeResult, error) {
	var (
		res     ChallengeResult
		authzID sql.NullString
	)
	at := now.UnixMilli()
	b := &pgx.Batch{}
	b.Queue(pgChallengeSettled, at, nullBytes(problem), id)
	b.Queue(pgOrderPromoted, at, id)
	err := e.pipeline(ctx, false, b, func(br pgx.BatchResults) error {
		res, authzID = ChallengeResult{}, sql.NullString{} // run again after a lost race
		var orderID, status sql.NullString
		if err := br.QueryRow().Scan(&authzID, &orderID, &status); err != nil {
			return err
		}
		res.OrderID, res.OrderStatus = orderID.String, acme.Status(status.String)
		var promoted string
		switch err := br.QueryRow().Scan(&promoted); {
		case err == nil:
			res.OrderStatus, res.OrderChanged = acme.Status(promoted), true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return ChallengeResult{}, fmt.Errorf("store: completing challenge %s: %w", id, db.unavailable(err))
	case !authzID.Valid:
		return ChallengeResult{}, fmt.Errorf("%w: challenge %s is not processing", ErrWrongState, id)
	case res.OrderID == "":
		return ChallengeResult{}, nil // the authorization was settled meanwhile
	}
	return res, nil
}

// pgGetAuthz is GetAuthz's statement on PostgreSQL: the order's profile
// read by the order's key in a subquery, where the join it replaces let
// the planner read the order through orders_profile_created by profile
// alone, every order of the profile, filtering on the id after. That plan
// costs what the order by key does while the tables are small, and a
// connection keeps the generic plan it made then (until the next ANALYZE
// of the table, a minute away at the soonest with autovacuum's defaults):
// in a 300-certificate benchmark from an empty database each read of an
// authorization came to touch 88–141 buffers instead of about 10.
const pgGetAuthz = `SELECT ` + authzCols + `, ` + challengeCols + ` FROM authorizations a
	LEFT JOIN challenges c ON c.authz_id = a.id
	WHERE a.id = $1 AND (SELECT o.profile FROM orders o WHERE o.id = a.order_id) = $2 ORDER BY c.position`
