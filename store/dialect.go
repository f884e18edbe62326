package store

// dialect is the seam between the statements this package writes once and
// the databases it runs on. Statements are written with ? placeholders and
// the SQL both SQLite and PostgreSQL accept (RETURNING, ON CONFLICT, partial
// indexes); what genuinely differs lives behind these methods.
type dialect interface {
	name() string
	// migrations is the dialect's ordered, append-only schema history.
	migrations() []migration
	// rebind turns ? placeholders into the dialect's own.
	rebind(stmt string) string
}

type sqliteDialect struct{}

func (sqliteDialect) name() string              { return "sqlite" }
func (sqliteDialect) migrations() []migration   { return sqliteMigrations }
func (sqliteDialect) rebind(stmt string) string { return stmt }
