package acme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// An audit search refuses an event not in Events, so an event constant
// left out of it could be written but never searched for.
func TestEveryEventConstantIsInTheListAnAuditSearchAccepts(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "acme.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s is not a string literal", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts = append(consts, v)
			}
		}
	}
	if len(consts) == 0 {
		t.Fatal("no Event constants found in acme.go")
	}
	for _, v := range consts {
		if !slices.Contains(Events, v) {
			t.Errorf("event %q is declared but not in Events", v)
		}
	}
	if len(Events) != len(consts) {
		t.Errorf("Events has %d entries, acme.go declares %d events", len(Events), len(consts))
	}
}
