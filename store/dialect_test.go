package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqliteOnly matches SQL that only SQLite speaks: what another dialect
// would have to rewrite if it appeared in a statement shared by all.
var sqliteOnly = regexp.MustCompile(`(?i)\b(json_each|json_extract|json_group_array|group_concat|rowid|pragma|sqlite_master|insert\s+or|without\s+rowid|ifnull|julianday|strftime|glob)\b`)

// The statements every dialect shares live in the package's files that are
// not SQLite's own (sqlite.go, sqlite_*.go, schema_sqlite.go): adding a
// database must not mean rewriting them.
func TestSharedStatementsUseNoSQLiteOnlySQL(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") ||
			strings.HasPrefix(name, "sqlite") || strings.HasSuffix(name, "_sqlite.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
			}
			if m := sqliteOnly.FindString(s); m != "" {
				t.Errorf("%s: %q is SQLite-only SQL; it belongs to the SQLite dialect", fset.Position(lit.Pos()), m)
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked %d files; the store has more shared files than that", checked)
	}
}
