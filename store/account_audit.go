package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// DeactivateAccountAudited moves a valid account to deactivated (RFC 8555
// §7.3.6) and records ev, for the account id, in the same transaction,
// with ev.Jobs (the notifications the change owes): the new state, its
// audit row and its notifications are stored together or not at all.
// ErrWrongState if the account is not valid.
//
// The account's pending operations are cancelled with it, as §7.3.6 says
// a server should: its pending and ready orders become invalid, its
// pending authorizations deactivated. An order already processing is
// left to finish; nothing can read it once the account is gone.
//
// At READ COMMITTED the guarded update comes first: of concurrent
// deactivations one changes the row and writes the audit row, the others
// find it deactivated.
func (db *DB) DeactivateAccountAudited(ctx context.Context, id string, ev AuditEvent, now time.Time) (Account, error) {
	ev.AccountID = id
	var a Account
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		a, err = scanAccount(tx.QueryRowContext(ctx, db.q(`UPDATE accounts SET status = 'deactivated', updated_at = ?
			WHERE id = ? AND status = 'valid' RETURNING `+accountCols), now.UnixMilli(), id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: account %s is not valid", ErrWrongState, id)
		}
		if err != nil {
			return err
		}
		// Each reaches the account's rows through its account index (see
		// "Rows read by their key" in dialect.go).
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE orders SET status = 'invalid', updated_at = ?
			WHERE account_id = ? AND (status IN ('pending','ready')) IS TRUE`), now.UnixMilli(), id); err != nil {
			return fmt.Errorf("invalidating its orders: %w", err)
		}
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE authorizations SET status = 'deactivated', updated_at = ?
			WHERE account_id = ? AND status = 'pending'`), now.UnixMilli(), id); err != nil {
			return fmt.Errorf("deactivating its authorizations: %w", err)
		}
		return db.insertAudit(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, ErrWrongState) {
		err = fmt.Errorf("store: deactivating account %s: %w", id, err)
	}
	return a, err
}
