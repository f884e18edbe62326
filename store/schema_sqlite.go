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
	{
		version: 2,
		name:    "acme",
		stmts: []string{
			// Server-wide secrets (the nonce MAC key), shared by every
			// instance on this database.
			`CREATE TABLE secrets (
				name       TEXT PRIMARY KEY,
				value      BLOB NOT NULL,
				created_at BIGINT NOT NULL
			)`,
			`CREATE TABLE accounts (
				id             TEXT PRIMARY KEY,
				profile        TEXT NOT NULL,
				key_thumbprint TEXT NOT NULL,
				key_jwk        TEXT NOT NULL,
				status         TEXT NOT NULL CHECK (status IN ('valid','deactivated','revoked')),
				contact        TEXT NOT NULL DEFAULT '[]',
				tos_agreed     INTEGER NOT NULL DEFAULT 0,
				created_at     BIGINT NOT NULL,
				updated_at     BIGINT NOT NULL,
				UNIQUE (profile, key_thumbprint)
			)`,
			// A nonce is valid once: its use is recorded until it expires.
			`CREATE TABLE used_nonces (
				nonce      TEXT PRIMARY KEY,
				expires_at BIGINT NOT NULL
			)`,
			`CREATE INDEX used_nonces_expiry ON used_nonces (expires_at)`,
			`CREATE TABLE orders (
				id             TEXT PRIMARY KEY,
				profile        TEXT NOT NULL,
				account_id     TEXT NOT NULL REFERENCES accounts (id),
				status         TEXT NOT NULL CHECK (status IN ('pending','ready','processing','valid','invalid')),
				identifiers    TEXT NOT NULL,
				not_before     BIGINT,
				not_after      BIGINT,
				expires_at     BIGINT NOT NULL,
				error          TEXT,
				csr            BLOB,
				certificate_id TEXT,
				created_at     BIGINT NOT NULL,
				updated_at     BIGINT NOT NULL
			)`,
			`CREATE INDEX orders_account ON orders (account_id, created_at)`,
			`CREATE TABLE authorizations (
				id               TEXT PRIMARY KEY,
				order_id         TEXT NOT NULL REFERENCES orders (id),
				account_id       TEXT NOT NULL,
				identifier_type  TEXT NOT NULL,
				identifier_value TEXT NOT NULL,
				wildcard         INTEGER NOT NULL DEFAULT 0,
				status           TEXT NOT NULL CHECK (status IN ('pending','valid','invalid','deactivated','expired','revoked')),
				expires_at       BIGINT NOT NULL,
				created_at       BIGINT NOT NULL,
				updated_at       BIGINT NOT NULL
			)`,
			`CREATE INDEX authorizations_order ON authorizations (order_id)`,
			`CREATE TABLE challenges (
				id           TEXT PRIMARY KEY,
				authz_id     TEXT NOT NULL REFERENCES authorizations (id),
				type         TEXT NOT NULL,
				token        TEXT NOT NULL,
				status       TEXT NOT NULL CHECK (status IN ('pending','processing','valid','invalid')),
				validated_at BIGINT,
				error        TEXT,
				updated_at   BIGINT NOT NULL
			)`,
			`CREATE INDEX challenges_authz ON challenges (authz_id)`,
			`CREATE INDEX challenges_processing ON challenges (status) WHERE status = 'processing'`,
			`CREATE TABLE certificates (
				id                TEXT PRIMARY KEY,
				order_id          TEXT NOT NULL UNIQUE REFERENCES orders (id),
				profile           TEXT NOT NULL,
				account_id        TEXT NOT NULL,
				serial            TEXT NOT NULL UNIQUE,
				chain_pem         TEXT NOT NULL,
				public_key        BLOB NOT NULL,
				not_before        BIGINT NOT NULL,
				not_after         BIGINT NOT NULL,
				revoked_at        BIGINT,
				revocation_reason INTEGER,
				created_at        BIGINT NOT NULL
			)`,
		},
	},
	{
		version: 3,
		name:    "relay",
		stmts: []string{
			// What the operator reads when an order failed: the real
			// reason, which the client only sees as a generic problem.
			`ALTER TABLE orders ADD COLUMN failure_detail TEXT`,
			// The relay signer's mapping from a local order to the work
			// upstream: everything a restarted process needs to finish it.
			`CREATE TABLE relay_orders (
				order_id           TEXT PRIMARY KEY REFERENCES orders (id),
				profile            TEXT NOT NULL,
				upstream_order_url TEXT,
				csr                BLOB NOT NULL,
				client_addr        TEXT NOT NULL DEFAULT '',
				user_agent         TEXT NOT NULL DEFAULT '',
				status             TEXT NOT NULL CHECK (status IN ('processing','valid','invalid')),
				detail             TEXT NOT NULL DEFAULT '',
				created_at         BIGINT NOT NULL,
				updated_at         BIGINT NOT NULL
			)`,
			`CREATE INDEX relay_orders_processing ON relay_orders (profile) WHERE status = 'processing'`,
		},
	},
	{
		version: 4,
		name:    "revocation_crl_audit",
		stmts: []string{
			// The revocation ledger: one row per revoked certificate,
			// written in the transaction that stamps the certificate, so
			// that a CRL can be rebuilt from it after any crash.
			// issuer_key_id names the local CA whose CRL lists the entry;
			// it is NULL when a backend (an upstream CA, a script) was told
			// instead and publishes its own revocation status.
			`CREATE TABLE revocations (
				id             INTEGER PRIMARY KEY AUTOINCREMENT,
				certificate_id TEXT NOT NULL UNIQUE REFERENCES certificates (id),
				profile        TEXT NOT NULL,
				order_id       TEXT NOT NULL,
				serial         TEXT NOT NULL,
				issuer_key_id  TEXT,
				reason         INTEGER,
				revoked_at     BIGINT NOT NULL,
				not_after      BIGINT NOT NULL,
				actor_kind     TEXT NOT NULL,
				actor_id       TEXT NOT NULL DEFAULT ''
			)`,
			`CREATE INDEX revocations_crl ON revocations (issuer_key_id, not_after) WHERE issuer_key_id IS NOT NULL`,
			// cRLNumber per issuing CA: only ever incremented, in the
			// transaction that stores the CRL carrying the new number.
			`CREATE TABLE crl_numbers (
				issuer_key_id TEXT PRIMARY KEY,
				last          BIGINT NOT NULL CHECK (last > 0)
			)`,
			// The latest CRL of each issuing CA, as served. ledger_seq is
			// the last revocations.id it took into account: a ledger row
			// past it means the CRL is stale.
			`CREATE TABLE crls (
				issuer_key_id TEXT PRIMARY KEY,
				number        BIGINT NOT NULL,
				this_update   BIGINT NOT NULL,
				next_update   BIGINT NOT NULL,
				ledger_seq    BIGINT NOT NULL,
				entries       INTEGER NOT NULL,
				der           BLOB NOT NULL,
				updated_at    BIGINT NOT NULL
			)`,
			// The audit trail: insert-only, no foreign keys (it outlives
			// what it mentions).
			`CREATE TABLE audit_events (
				id          INTEGER PRIMARY KEY AUTOINCREMENT,
				at          BIGINT NOT NULL,
				event       TEXT NOT NULL,
				outcome     TEXT NOT NULL,
				profile     TEXT NOT NULL DEFAULT '',
				actor_kind  TEXT NOT NULL DEFAULT '',
				actor_id    TEXT NOT NULL DEFAULT '',
				order_id    TEXT NOT NULL DEFAULT '',
				account_id  TEXT NOT NULL DEFAULT '',
				identifiers TEXT NOT NULL DEFAULT '[]',
				serial      TEXT NOT NULL DEFAULT '',
				client_ip   TEXT NOT NULL DEFAULT '',
				client_name TEXT NOT NULL DEFAULT '',
				user_agent  TEXT NOT NULL DEFAULT '',
				reason      TEXT NOT NULL DEFAULT '',
				detail      TEXT NOT NULL DEFAULT ''
			)`,
			`CREATE INDEX audit_at ON audit_events (at)`,
			`CREATE INDEX audit_profile ON audit_events (profile, at)`,
			`CREATE INDEX audit_event ON audit_events (event, at)`,
			`CREATE INDEX audit_order ON audit_events (order_id) WHERE order_id <> ''`,
			`CREATE INDEX audit_account ON audit_events (account_id) WHERE account_id <> ''`,
			`CREATE INDEX audit_serial ON audit_events (serial) WHERE serial <> ''`,
			`CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
				BEGIN SELECT RAISE(ABORT, 'audit_events is insert-only'); END`,
			`CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
				BEGIN SELECT RAISE(ABORT, 'audit_events is insert-only'); END`,
			// Operators list orders of a profile by status, newest first.
			`CREATE INDEX orders_profile ON orders (profile, status, created_at)`,
		},
	},
	{
		version: 5,
		name:    "used_nonces_by_expiry",
		stmts: []string{
			// One clustered B-tree keyed by expiry then nonce: recording a
			// use is an append near the end, and pruning is a range delete,
			// with no second index to maintain on every signed request.
			`DROP TABLE used_nonces`,
			`CREATE TABLE used_nonces (k BLOB PRIMARY KEY) WITHOUT ROWID`,
		},
	},
	{
		version: 6,
		name:    "flushes",
		stmts: []string{
			// One row for Flush to rewrite: a durable write needs a page to
			// change before SQLite syncs anything.
			`CREATE TABLE flushes (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL)`,
		},
	},
	{
		version: 7,
		name:    "audit_prune",
		stmts: []string{
			// The audit trail may now be pruned, by retention or by an
			// operator, and by nothing else: PruneAudit writes its cutoff
			// here, deletes, and removes the cutoff in one transaction, so
			// a delete outside it (or of a row at or after the cutoff)
			// still aborts. Updates stay refused.
			`CREATE TABLE audit_prune_cutoff (id INTEGER PRIMARY KEY CHECK (id = 1), before BIGINT NOT NULL)`,
			`DROP TRIGGER audit_events_no_delete`,
			`CREATE TRIGGER audit_events_delete_only_by_prune BEFORE DELETE ON audit_events
				WHEN NOT EXISTS (SELECT 1 FROM audit_prune_cutoff WHERE OLD.at < before)
				BEGIN SELECT RAISE(ABORT, 'audit_events is insert-only: rows are deleted only by a prune, older than its cutoff'); END`,
		},
	},
	{
		version: 8,
		name:    "crl_numbers_by_name",
		stmts: []string{
			// cRLNumber per issuing CA's name (RFC 5280 §5.2.3): a CA
			// renewed with a new key under the same name continues the
			// sequence. crl_numbers (per key) stays, so that a key's
			// first CRL after this migration continues from its last.
			`CREATE TABLE crl_name_numbers (
				issuer_name TEXT PRIMARY KEY,
				last        BIGINT NOT NULL CHECK (last > 0)
			)`,
		},
	},
	{
		version: 9,
		name:    "order_identifiers",
		stmts: []string{
			// An order's identifiers as rows, so that SQL finds orders by
			// identifier without JSON functions. orders.identifiers stays:
			// it is the order's own copy, read with the order in one row;
			// identifiers never change after the order is created, and
			// CreateOrder writes both in one transaction.
			`CREATE TABLE order_identifiers (
				order_id TEXT    NOT NULL REFERENCES orders (id),
				position INTEGER NOT NULL,
				type     TEXT    NOT NULL,
				value    TEXT    NOT NULL,
				PRIMARY KEY (order_id, position)
			)`,
			`CREATE INDEX order_identifiers_value ON order_identifiers (value)`,
			`INSERT INTO order_identifiers (order_id, position, type, value)
				SELECT o.id, j.key, COALESCE(json_extract(j.value, '$.type'), ''), COALESCE(json_extract(j.value, '$.value'), '')
				FROM orders o, json_each(o.identifiers) j`,
		},
	},
	{
		version: 10,
		name:    "authorization_positions",
		stmts: []string{
			// An order's authorizations, and an authorization's challenges,
			// keep the order they were created in as a column, not as
			// SQLite's rowid. Rows so far were inserted in that order.
			`ALTER TABLE authorizations ADD COLUMN position INTEGER NOT NULL DEFAULT 0`,
			`UPDATE authorizations SET position = (SELECT COUNT(*) FROM authorizations b
				WHERE b.order_id = authorizations.order_id AND b.rowid < authorizations.rowid)`,
			`ALTER TABLE challenges ADD COLUMN position INTEGER NOT NULL DEFAULT 0`,
			`UPDATE challenges SET position = (SELECT COUNT(*) FROM challenges b
				WHERE b.authz_id = challenges.authz_id AND b.rowid < challenges.rowid)`,
		},
	},
	{
		version: 11,
		name:    "order_client",
		stmts: []string{
			// The client that finalized an order, recorded when the order
			// is claimed for issue, so that whoever finishes the order
			// later (a signer settling it, the resume sweep) names it in
			// the audit trail. Orders mapped by the relay so far have it in
			// relay_orders.
			`ALTER TABLE orders ADD COLUMN client_addr TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN user_agent TEXT NOT NULL DEFAULT ''`,
			`UPDATE orders SET client_addr = r.client_addr, user_agent = r.user_agent
				FROM relay_orders r WHERE r.order_id = orders.id`,
		},
	},
	{
		version: 12,
		name:    "certificate_profiles",
		stmts: []string{
			// The certificate profile (draft-ietf-acme-profiles) an order
			// chose at new-order; '' for none.
			`ALTER TABLE orders ADD COLUMN certificate_profile TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		version: 13,
		name:    "eab",
		stmts: []string{
			// External account binding keys (RFC 8555 §7.3.4), minted by an
			// operator for one profile. hmac_key is the MAC key as handed
			// out: it must be kept to verify a binding, and is never read
			// back by anything but that check. Times are Unix ms, 0 for
			// never. bound_account is the last account the key bound.
			`CREATE TABLE eab_keys (
				kid           TEXT    PRIMARY KEY,
				profile       TEXT    NOT NULL,
				label         TEXT    NOT NULL,
				hmac_key      BLOB    NOT NULL,
				reusable      INTEGER NOT NULL DEFAULT 0,
				created_at    BIGINT  NOT NULL,
				expires_at    BIGINT  NOT NULL DEFAULT 0,
				revoked_at    BIGINT  NOT NULL DEFAULT 0,
				used_at       BIGINT  NOT NULL DEFAULT 0,
				bound_account TEXT    NOT NULL DEFAULT '',
				bound_count   INTEGER NOT NULL DEFAULT 0
			)`,
			`CREATE INDEX eab_keys_profile ON eab_keys (profile, created_at)`,
			// The binding an account was created with: its key id and the
			// key's label, kept when the key is revoked.
			`ALTER TABLE accounts ADD COLUMN eab_kid TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE accounts ADD COLUMN eab_label TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		version: 14,
		name:    "renewal_info",
		stmts: []string{
			// Renewal information (RFC 9773). issuer_key_id names the CA
			// that signed the certificate as signer.LeafIssuerKeyID does
			// (its authority key identifier in hex), so that an operator
			// selects a CA's certificates, and a certID is checked against
			// it; '' for certificates issued before this migration.
			`ALTER TABLE certificates ADD COLUMN issuer_key_id TEXT NOT NULL DEFAULT ''`,
			// An operator's request to renew early: the time it was made
			// (the renewal window moves there) and the page that says why.
			// The selection is stored here, once, not recomputed from
			// configuration on every renewalInfo request.
			`ALTER TABLE certificates ADD COLUMN renew_early_at BIGINT`,
			`ALTER TABLE certificates ADD COLUMN explanation_url TEXT NOT NULL DEFAULT ''`,
			`CREATE INDEX certificates_issuer ON certificates (issuer_key_id)`,
			// newOrder's "replaces" (RFC 9773 §5): the certID as the client
			// sent it, echoed in the order, and the certificate it names,
			// which at most one order that is not invalid may replace.
			`ALTER TABLE orders ADD COLUMN replaces TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN replaces_certificate_id TEXT`,
			`CREATE INDEX orders_replaces ON orders (replaces_certificate_id) WHERE replaces_certificate_id IS NOT NULL`,
		},
	},
	{
		version: 15,
		name:    "rate_limits",
		stmts: []string{
			// The rate limit buckets (see ratelimits.go): one row per
			// bucket key with its theoretical arrival time, in Unix
			// nanoseconds. A row whose TAT has passed is a full bucket,
			// the same as no row, and is pruned (without an index on the
			// TAT: every spend would rewrite it).
			`CREATE TABLE rate_limits (
				key    TEXT   PRIMARY KEY,
				tat_ns BIGINT NOT NULL
			)`,
			// The pending_authorizations cap counts an account's pending
			// authorizations on each new-order.
			`CREATE INDEX authorizations_account_pending ON authorizations (account_id, expires_at) WHERE status = 'pending'`,
		},
	},
	{
		version: 16,
		name:    "relay_shared",
		stmts: []string{
			// The relay's upstream http-01 challenges, answered by the
			// acme_proxy_challenges handler of whichever instance the
			// upstream reaches. A row lives from Present to CleanUp;
			// expires_at bounds one that a crash left behind.
			`CREATE TABLE relay_http_tokens (
				token      TEXT   PRIMARY KEY,
				identifier TEXT   NOT NULL,
				key_auth   TEXT   NOT NULL,
				expires_at BIGINT NOT NULL
			)`,
			`CREATE INDEX relay_http_tokens_expiry ON relay_http_tokens (expires_at)`,
			// The relay's upstream account per upstream (certmagic's issuer
			// key of its directory) and profile, shared by every instance:
			// one continues the upstream orders another placed. key_pem is
			// the account's private key (PKCS#8 PEM).
			`CREATE TABLE relay_accounts (
				upstream   TEXT   NOT NULL,
				profile    TEXT   NOT NULL,
				key_pem    TEXT   NOT NULL,
				location   TEXT   NOT NULL DEFAULT '',
				contact    TEXT   NOT NULL DEFAULT '[]',
				created_at BIGINT NOT NULL,
				updated_at BIGINT NOT NULL,
				PRIMARY KEY (upstream, profile)
			)`,
		},
	},
	{
		version: 17,
		name:    "split_roles",
		stmts: []string{
			// The lane of a job: '' (any runner claims it) or a name a
			// runner must serve to claim it, so that work only some
			// instances can do (signing for a profile) is never claimed by
			// the others.
			`ALTER TABLE jobs ADD COLUMN lane TEXT NOT NULL DEFAULT ''`,
			// What the instances that sign for a profile publish for the
			// instances that serve it without its signer: the signer's
			// module name, where revocations are recorded ('ledger' or
			// 'job'), the issuing CA chain (PEM, '' when the signer has
			// none), and the CAs whose CRLs are published (JSON), the one
			// issuing now first named by current_issuer.
			`CREATE TABLE signer_publications (
				profile        TEXT   PRIMARY KEY,
				signer         TEXT   NOT NULL,
				revocation     TEXT   NOT NULL,
				ca_chain       TEXT   NOT NULL DEFAULT '',
				current_issuer TEXT   NOT NULL DEFAULT '',
				issuers        TEXT   NOT NULL DEFAULT '[]',
				updated_at     BIGINT NOT NULL
			)`,
		},
	},
	{
		version: 18,
		name:    "retention_indexes",
		stmts: []string{
			// The retention sweep (PruneRetention) finds what it deletes by
			// these, one small batch at a time, without scanning a table:
			// orders without a certificate by status and expiry,
			// certificates by expiry, deactivated accounts by their change.
			`CREATE INDEX orders_expiry ON orders (status, expires_at)`,
			`CREATE INDEX certificates_expiry ON certificates (not_after)`,
			`CREATE INDEX accounts_status ON accounts (status, updated_at)`,
		},
	},
	{
		version: 19,
		name:    "order_search",
		stmts: []string{
			// The operator's order search (ListOrders) newest first, by
			// none, status, profile or account, reads an index in the
			// listing's order (created_at DESC, id DESC) and stops at the
			// page's end, instead of sorting every order: 0.36 s at
			// 200,000 orders without. By identifier and by serial it starts
			// from order_identifiers_value and the certificates' serial.
			`CREATE INDEX orders_created ON orders (created_at, id)`,
			`CREATE INDEX orders_status_created ON orders (status, created_at, id)`,
			`CREATE INDEX orders_profile_created ON orders (profile, created_at, id)`,
			`DROP INDEX orders_account`,
			`CREATE INDEX orders_account ON orders (account_id, created_at, id)`,
		},
	},
	{
		version: 20,
		name:    "children_in_position",
		stmts: []string{
			// An order's authorizations and an authorization's challenges
			// are read in their position (GetOrder, GetAuthz, on every
			// poll): with the position in the index the rows come in that
			// order, and no statement on the issuance path sorts.
			`DROP INDEX authorizations_order`,
			`CREATE INDEX authorizations_order ON authorizations (order_id, position)`,
			`DROP INDEX challenges_authz`,
			`CREATE INDEX challenges_authz ON challenges (authz_id, position)`,
		},
	},
	{
		version: 21,
		name:    "rate_limits_without_rowid",
		stmts: []string{
			// The rate limit buckets in one b-tree, by key, instead of a
			// rowid table and an index of its keys: every new-order spends
			// from them, and a new bucket then writes one b-tree, not two.
			// The rows are copied as they are.
			`CREATE TABLE rate_limits_new (
				key    TEXT   PRIMARY KEY,
				tat_ns BIGINT NOT NULL
			) WITHOUT ROWID`,
			`INSERT INTO rate_limits_new (key, tat_ns) SELECT key, tat_ns FROM rate_limits`,
			`DROP TABLE rate_limits`,
			`ALTER TABLE rate_limits_new RENAME TO rate_limits`,
		},
	},
	{
		version: 22,
		name:    "order_status_indexes",
		stmts: []string{
			// Every status change of an order (pending, ready, processing,
			// valid: three on each issuance) moved its entry in every index
			// keyed by its status, up to two pages apiece. orders_profile
			// (profile, status, created_at) served only the resume sweep's
			// reclaim of processing orders, which finds them through
			// orders_status_created as well (the order search by profile
			// and status reads orders_profile_created). And the retention
			// sweep asks orders_expiry only for unfinished orders (pending,
			// ready or invalid), so it holds only those: an issuance's
			// order leaves it when it is claimed. It stays keyed by status,
			// so that SQLite's planner, which has no statistics, prefers it
			// to orders_status_created for the sweep's status and expiry.
			`DROP INDEX orders_profile`,
			`DROP INDEX orders_expiry`,
			`CREATE INDEX orders_expiry ON orders (status, expires_at) WHERE status IN ('pending','ready','invalid')`,
		},
	},
	{
		version: 23,
		name:    "crl_parts",
		stmts: []string{
			// A CRL is stored in parts of up to 256 KiB (crlPartSize), each
			// written in a short write of its own, and crls names the number
			// and the part count of the latest one in a last small write:
			// written whole, a CRL of 100,000 entries (4.7 MiB) held SQLite's
			// one writer 66-105 ms, and every issuance waited behind it.
			// Parts of other numbers than the one crls names are either being
			// written (a higher number, not yet named) or left over (a lower
			// one, or a publisher that died), deleted by the next CRL stored.
			// The CRL already stored becomes its first and only part.
			`CREATE TABLE crl_parts (
				issuer_key_id TEXT    NOT NULL,
				number        BIGINT  NOT NULL,
				part          INTEGER NOT NULL,
				der           BLOB    NOT NULL,
				PRIMARY KEY (issuer_key_id, number, part)
			)`,
			`INSERT INTO crl_parts (issuer_key_id, number, part, der) SELECT issuer_key_id, number, 0, der FROM crls`,
			`ALTER TABLE crls ADD COLUMN parts INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE crls DROP COLUMN der`,
		},
	},
	{
		version: 24,
		name:    "certificates_unnamed_issuer",
		stmts: []string{
			// certificates_issuer took an entry for every certificate
			// stored, in the issuance's write, for two operator commands:
			// the renew-early naming of the issuers of certificates stored
			// before migration renewal_info (CertificatesWithoutIssuer,
			// which asks for issuer_key_id = '' in id order) and a renew
			// early selected by issuer (an UPDATE of every unexpired
			// certificate of a CA, through certificates_expiry as well).
			// The first needs only the certificates without an issuer, in
			// id order: this partial index, which a certificate stored
			// with its issuer (all of them since) never enters.
			`DROP INDEX certificates_issuer`,
			`CREATE INDEX certificates_unnamed_issuer ON certificates (id) WHERE issuer_key_id = ''`,
		},
	},
	{
		version: 25,
		name:    "crl_parts_held_by",
		stmts: []string{
			// A CRL republished with what it listed before (a regeneration
			// with no entry gone: entries are in ledger order, so new ones
			// only change its last parts) has the same bytes in every part
			// but its first and last. Those parts are not written again:
			// the new CRL's row names, in held_by, the number of the row
			// of the same part that holds the bytes (its der left empty),
			// which digest (SHA-256 of der, on rows that hold bytes) finds.
			// A CRL of 100,000 entries regenerated once a second wrote its
			// 4.7 MiB each time.
			`ALTER TABLE crl_parts ADD COLUMN digest BLOB`,
			`ALTER TABLE crl_parts ADD COLUMN held_by INTEGER`,
		},
	},
	{
		version: 26,
		name:    "revocations_tx",
		stmts: []string{
			// PostgreSQL's: the transaction that inserted a ledger row, by
			// which a CRL built from the last one finds a row that
			// committed after that one was read with an id below it. Never
			// set here — SQLite commits ledger rows in the order of their
			// ids — and so never in this partial index: here for one
			// schema in both engines.
			`ALTER TABLE revocations ADD COLUMN tx BIGINT`,
			`CREATE INDEX revocations_tx ON revocations (issuer_key_id, tx) WHERE tx IS NOT NULL`,
		},
	},
	{
		version: 27,
		name:    "certificates_compromised_key",
		stmts: []string{
			// A key whose certificate was revoked for keyCompromise is
			// not certified again (KeyRevokedForCompromise): those
			// certificates by their key, and no other.
			`CREATE INDEX certificates_compromised_key ON certificates (public_key) WHERE revocation_reason = 1`,
		},
	},
	{
		version: 28,
		name:    "abandon_once",
		stmts: []string{
			// A retired job's side effects are written once (see
			// jobs.AbandonKey): an audit row that a job's Abandon writes
			// carries a key naming that retirement, and a second row with
			// the key — Abandon run again after a crash before the job's
			// retirement was recorded — is not written. Rows without a
			// key (NULL, nearly all) stay out of the index: an audit row
			// costs no more to write, and the migration of a large
			// table builds an empty index.
			`ALTER TABLE audit_events ADD COLUMN dedup_key TEXT`,
			`CREATE UNIQUE INDEX audit_dedup_key ON audit_events (dedup_key) WHERE dedup_key IS NOT NULL`,
			// How often an operator revived the job once it was retired:
			// a revived job that fails again is a second retirement, with
			// a key of its own.
			`ALTER TABLE jobs ADD COLUMN revivals INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		version: 29,
		name:    "serial_per_issuer",
		stmts: []string{
			// A serial is unique per issuing CA (RFC 5280 §4.1.2.2), not
			// across the store: script and relay signers store what CAs
			// this server does not run issued, and two `openssl ca` CAs
			// (or one created again) each count from 01. Uniqueness is
			// now on (serial, issuer_key_id) — serial first, so that the
			// one index also serves every lookup by serial — and
			// certificates stored before migration renewal_info share
			// issuer_key_id '', under which their serials were unique.
			//
			// SQLite cannot drop a column's inline UNIQUE: the table is
			// built again (https://sqlite.org/lang_altertable.html, the
			// 12 steps), in the migration's transaction. Foreign keys are
			// on and PRAGMA foreign_keys cannot change inside a
			// transaction, so, rather than turning them off, the one
			// table that references certificates — revocations — is
			// built again too, referencing the new table: the old
			// certificates table is then dropped with no row pointing at
			// it, and renaming the new one to certificates renames that
			// reference with it. Every row is copied as it is, in rowid
			// order, and revocations keeps its AUTOINCREMENT sequence
			// (crls.ledger_seq is a revocation id: a new ledger row must
			// never take an id at or below one a CRL already took into
			// account, even when retention deleted the rows that had them).
			`CREATE TABLE certificates_new (
				id                TEXT PRIMARY KEY,
				order_id          TEXT NOT NULL UNIQUE REFERENCES orders (id),
				profile           TEXT NOT NULL,
				account_id        TEXT NOT NULL,
				serial            TEXT NOT NULL,
				chain_pem         TEXT NOT NULL,
				public_key        BLOB NOT NULL,
				not_before        BIGINT NOT NULL,
				not_after         BIGINT NOT NULL,
				revoked_at        BIGINT,
				revocation_reason INTEGER,
				created_at        BIGINT NOT NULL,
				issuer_key_id     TEXT NOT NULL DEFAULT '',
				renew_early_at    BIGINT,
				explanation_url   TEXT NOT NULL DEFAULT ''
			)`,
			`INSERT INTO certificates_new (id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
					revoked_at, revocation_reason, created_at, issuer_key_id, renew_early_at, explanation_url)
				SELECT id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
					revoked_at, revocation_reason, created_at, issuer_key_id, renew_early_at, explanation_url
				FROM certificates ORDER BY rowid`,
			`CREATE TABLE revocations_new (
				id             INTEGER PRIMARY KEY AUTOINCREMENT,
				certificate_id TEXT NOT NULL UNIQUE REFERENCES certificates_new (id),
				profile        TEXT NOT NULL,
				order_id       TEXT NOT NULL,
				serial         TEXT NOT NULL,
				issuer_key_id  TEXT,
				reason         INTEGER,
				revoked_at     BIGINT NOT NULL,
				not_after      BIGINT NOT NULL,
				actor_kind     TEXT NOT NULL,
				actor_id       TEXT NOT NULL DEFAULT '',
				tx             BIGINT
			)`,
			`INSERT INTO revocations_new (id, certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after,
					actor_kind, actor_id, tx)
				SELECT id, certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after,
					actor_kind, actor_id, tx
				FROM revocations ORDER BY id`,
			`DELETE FROM sqlite_sequence WHERE name = 'revocations_new'`,
			`INSERT INTO sqlite_sequence (name, seq) SELECT 'revocations_new', seq FROM sqlite_sequence WHERE name = 'revocations'`,
			`DROP TABLE revocations`,
			`DROP TABLE certificates`,
			`ALTER TABLE certificates_new RENAME TO certificates`,
			`ALTER TABLE revocations_new RENAME TO revocations`,
			`CREATE UNIQUE INDEX certificates_serial_issuer ON certificates (serial, issuer_key_id)`,
			`CREATE INDEX certificates_unnamed_issuer ON certificates (id) WHERE issuer_key_id = ''`,
			`CREATE INDEX certificates_expiry ON certificates (not_after)`,
			`CREATE INDEX certificates_compromised_key ON certificates (public_key) WHERE revocation_reason = 1`,
			`CREATE INDEX revocations_crl ON revocations (issuer_key_id, not_after) WHERE issuer_key_id IS NOT NULL`,
			`CREATE INDEX revocations_tx ON revocations (issuer_key_id, tx) WHERE tx IS NOT NULL`,
		},
	},
	{
		version: 30,
		name:    "abandon_owed",
		stmts: []string{
			// A job an operator cancelled while it waited is settled as
			// cancelled at once, and owes its handler's Abandon: a runner
			// of its kind, on any instance, claims it to run the Abandon
			// (store.ClaimJobsIn) and clears the debt once it succeeded.
			// Owed jobs are few and short-lived: a partial index by kind
			// and lane finds them without reading the cancelled jobs of
			// the past (which jobs_due, by kind and status, would).
			`ALTER TABLE jobs ADD COLUMN abandon_owed INTEGER NOT NULL DEFAULT 0`,
			`CREATE INDEX jobs_abandon_owed ON jobs (kind, lane) WHERE abandon_owed = 1`,
		},
	},
	{
		version: 31,
		name:    "relay_placements",
		stmts: []string{
			// Who places the upstream order of a local order, with
			// prepare_upstream on: a preparation (at new-order) and a
			// relay (at finalize) may run on two instances at once. The
			// one that placed the claim (owner) until claimed_until
			// places the order and records its URL here; the others wait
			// for the URL, or take the claim over once it lapsed (its
			// owner died before it placed the order).
			`CREATE TABLE relay_placements (
				order_id           TEXT   PRIMARY KEY REFERENCES orders (id),
				owner              TEXT   NOT NULL,
				claimed_until      BIGINT NOT NULL,
				upstream_order_url TEXT,
				updated_at         BIGINT NOT NULL
			)`,
		},
	},
	{
		version: 32,
		name:    "alternate_chains",
		stmts: []string{
			// The alternate chains a signer offers for a certificate
			// beside its default one (RFC 8555 §7.4.2: an upstream CA
			// whose issuer is cross-signed), a JSON array of PEM chains,
			// '' for none: served as cert/{id}/{n}, each linked from the
			// default chain with Link rel="alternate".
			`ALTER TABLE certificates ADD COLUMN alternate_chains TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		version: 33,
		name:    "jobs_rerun",
		stmts: []string{
			// A running job asked to run again after its attempt, by an
			// enqueue of its kind and key that found it running
			// (store.EnqueueJob with Rerun): the earliest time asked for,
			// NULL for none. The write that records the attempt done
			// makes the job ready again at it (store.CompleteJob): a CRL
			// regeneration that had read the ledger before a revocation
			// committed builds once more, and lists it.
			`ALTER TABLE jobs ADD COLUMN rerun_at INTEGER`,
		},
	},
	{
		version: 34,
		name:    "crls_mark",
		stmts: []string{
			// The read snapshot the stored CRL was built from
			// (CRLRead.Mark), by which StaleCRLIssuers finds a ledger row
			// below its ledger_seq that committed after it read the
			// ledger. NULL here: SQLite commits ledger rows in the order
			// of their ids, and a CRL's ledger_seq alone says what it saw.
			`ALTER TABLE crls ADD COLUMN mark TEXT`,
		},
	},
	{
		version: 35,
		name:    "revocations_ledger",
		stmts: []string{
			// Each CA's ledger rows in id order (SQLite keeps the rowid,
			// the id, at the end of every index entry), so that
			// StaleCRLIssuers, which every instance runs once a minute,
			// reads of each CA only the rows above its CRL's ledger_seq
			// — none, or the first that is not on it — rather than every
			// row of the ledger above it, which for a CA retired long
			// ago is the whole ledger of the others.
			`CREATE INDEX revocations_ledger ON revocations (issuer_key_id, id) WHERE issuer_key_id IS NOT NULL`,
		},
	},
	{
		version: 36,
		name:    "prune_progress",
		stmts: []string{
			// The audit row of each prune or sweep under way (PruneAudit,
			// PruneRetention), rewritten with the running total in the
			// transaction of each batch and deleted with the row written
			// at its end: a prune whose process dies between two batches
			// leaves it here, and RecordUnfinishedPrunes writes it to the
			// trail, so that the batches it committed are audited. One
			// row per prune under way.
			`CREATE TABLE prune_progress (
				id         TEXT PRIMARY KEY,
				updated_at BIGINT NOT NULL,
				audit_row  TEXT NOT NULL
			)`,
		},
	},
	{
		version: 37,
		name:    "orders_claimed_by",
		stmts: []string{
			// The process incarnation (package incarnation) whose finalize,
			// or resume, claimed a processing order; NULL for a claim made
			// before this column, or by a process that registered none. A
			// restarted process resumes at once the orders claimed by an
			// incarnation of its host it sees has exited, rather than
			// after StuckAfter (store.ReclaimOrdersClaimedBy).
			`ALTER TABLE orders ADD COLUMN claimed_by TEXT`,
		},
	},
}
