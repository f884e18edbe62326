package store

import "database/sql"

// rawW is an SQLite store's writer connection, for tests that write
// around the store's methods (an old schema's rows, a forbidden change).
func rawW(db *DB) *sql.DB { return db.eng.(*sqliteEngine).w }
