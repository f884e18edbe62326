package store

// sqliteMigrations is SQLite's schema history. Times are Unix milliseconds
// in BIGINT columns so the same statements work on PostgreSQL.
var sqliteMigrations = []migration{
	{
		version: 1,
		name:    "jobs",
		stmts: []string{
			`CREATE TABLE jobs (
				id               INTEGER PRIMARY KEY AUTOINCREMENT,
				kind             TEXT    NOT NULL,
				key              TEXT,
				payload          TEXT    NOT NULL DEFAULT '{}',
				status           TEXT    NOT NULL CHECK (status IN ('ready','running','done','failed','cancelled')),
				attempts         INTEGER NOT NULL DEFAULT 0,
				max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
				run_at           BIGINT  NOT NULL,
				deadline         BIGINT,
				lease_owner      TEXT,
				lease_until      BIGINT,
				last_error       TEXT    NOT NULL DEFAULT '',
				cancel_requested INTEGER NOT NULL DEFAULT 0,
				created_at       BIGINT  NOT NULL,
				updated_at       BIGINT  NOT NULL,
				finished_at      BIGINT
			)`,
			// At most one live job per kind and key; NULL keys never collide.
			`CREATE UNIQUE INDEX jobs_live_key ON jobs (kind, key) WHERE status IN ('ready','running')`,
			`CREATE INDEX jobs_due ON jobs (kind, status, run_at)`,
			`CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL`,
		},
	},
}
