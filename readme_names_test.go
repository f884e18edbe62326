package caddyacmeproxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// An operator alerts on the event names of the log and on the metrics'
// names, as the README lists them: every event a log line of the code
// names, and every metric it registers, is in the README, so that a new
// one is documented with the code that writes it.
func TestEveryLogEventAndMetricOfTheCodeIsInTheREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	patterns := []struct {
		what string
		re   *regexp.Regexp
		in   func(name string) string // as the README writes it
	}{
		{"log event", regexp.MustCompile(`zap\.String\("event", "([a-z0-9_]+)"\)`), func(n string) string { return "`" + n + "`" }},
		{"metric", regexp.MustCompile(`(?:counter|histogram)\("([a-z0-9_]+)"|BuildFQName\(metricsNamespace, metricsSubsystem, "([a-z0-9_]+)"\)`),
			func(n string) string { return "`" + n + "`" }},
	}
	found := map[string]int{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, p := range patterns {
			for _, m := range p.re.FindAllStringSubmatch(string(src), -1) {
				name := m[1]
				if name == "" {
					name = m[2]
				}
				found[p.what]++
				if !strings.Contains(string(readme), p.in(name)) {
					t.Errorf("the %s %q (%s) is not in the README", p.what, name, path)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The patterns still find what the code writes.
	if found["log event"] < 50 || found["metric"] < 14 {
		t.Fatalf("found %d log events and %d metrics in the code; the patterns no longer match how it names them", found["log event"], found["metric"])
	}
}

// An operator alerts on warn and error lines by their event: every such
// line the code writes names one (a zap.String("event", …) among its
// fields), so that none is missed by an alert on the README's names.
func TestEveryWarnAndErrorLogLineNamesAnEvent(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Warn" && sel.Sel.Name != "Error") || !isMessage(call.Args[0]) {
				return true // not a zap line: http.Error(w, …), t.Error(…)
			}
			checked++
			for _, a := range call.Args[1:] {
				if fc, ok := a.(*ast.CallExpr); ok && len(fc.Args) == 2 {
					if lit, ok := fc.Args[0].(*ast.BasicLit); ok && lit.Value == `"event"` {
						return true
					}
				}
			}
			t.Errorf("%s: a %s line without an event field", fset.Position(call.Pos()), strings.ToLower(sel.Sel.Name))
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 60 {
		t.Fatalf("found %d warn and error lines; the walk no longer finds how the code logs", checked)
	}
}

// isMessage reports whether e is a log message: a string literal, or
// literals and names joined by +.
func isMessage(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.BasicLit:
		return v.Kind == token.STRING
	case *ast.BinaryExpr:
		return v.Op == token.ADD && (isMessage(v.X) || isMessage(v.Y))
	}
	return false
}
