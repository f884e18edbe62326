package caddyacmeproxy

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The README's Layout says, per package, what of this module it may
// import: a package imports only what its row names (a name, or a name
// "and below": it and what it imports), a row saying "nothing" imports
// nothing of this module, and every package has a row.
func TestEveryPackageImportsOnlyWhatTheREADMEsLayoutSays(t *testing.T) {
	const module = "github.com/acmeproxy/caddy-acme-proxy"
	imports := modulePackageImports(t, module)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("the README has no Layout section")
	}
	// find names a package by its path or by the last elements of it
	// (`authority` for acmeproxy/authority).
	find := func(name string) []string {
		name = strings.TrimSuffix(name, "/")
		var out []string
		for p := range imports {
			if p == name || strings.HasSuffix(p, "/"+name) {
				out = append(out, p)
			}
		}
		return out
	}
	var closure func(p string, into map[string]bool)
	closure = func(p string, into map[string]bool) {
		if into[p] {
			return
		}
		into[p] = true
		for _, q := range imports[p] {
			closure(q, into)
		}
	}
	code := regexp.MustCompile("`([a-z0-9_/.]+)`")
	override := regexp.MustCompile("`([a-z0-9_/]+)`: ((?:`[a-z0-9_/]+`(?:, )?)+)")
	rows := 0
	covered := map[string]bool{}
	for line := range strings.SplitSeq(layout, "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) != 3 || strings.HasPrefix(line, "| package") || strings.HasPrefix(line, "|---") {
			continue
		}
		rows++
		var pkgs []string
		if strings.HasPrefix(cells[0], "| root") {
			pkgs = []string{"."}
		} else {
			for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
				found := find(m[1])
				if len(found) == 0 && m[1] != "examples/" {
					t.Errorf("the Layout names %s, which is no package", m[1])
				}
				pkgs = append(pkgs, found...)
			}
		}
		for _, p := range pkgs {
			covered[p] = true
		}
		says := strings.TrimSuffix(cells[2], " |")
		if strings.Contains(says, "everything above") || strings.Contains(says, "tests only") || says == "—" {
			continue
		}
		for _, p := range pkgs {
			allowed := map[string]bool{}
			stated := says
			for _, m := range override.FindAllStringSubmatch(says, -1) {
				if slices.Contains(find(m[1]), p) {
					stated = m[2] // this package's own list
				}
				if stated == says {
					stated = strings.Replace(stated, m[0], "", 1)
				}
			}
			if stated == "root" {
				stated = "`.`"
			}
			for _, m := range code.FindAllStringSubmatch(stated, -1) {
				for _, q := range find(m[1]) {
					if strings.Contains(stated, "and below") {
						closure(q, allowed)
					} else {
						allowed[q] = true
					}
				}
			}
			for _, q := range imports[p] {
				if !allowed[q] {
					t.Errorf("%s imports %s; the README's Layout says it imports %q", p, q, says)
				}
			}
		}
	}
	if rows < 20 {
		t.Fatalf("found %d rows in the README's Layout; it has more", rows)
	}
	for p := range imports {
		if !covered[p] {
			t.Errorf("the package %s has no row in the README's Layout", p)
		}
	}
}

// modulePackageImports returns each package of the module (by its
// directory: "." for the root) and what of the module its non-test files
// import.
func modulePackageImports(t *testing.T, module string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if _, ok := out[dir]; !ok {
			out[dir] = nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rel, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(out[dir], rel) {
				out[dir] = append(out[dir], rel)
			} else if p == module && !slices.Contains(out[dir], ".") {
				out[dir] = append(out[dir], ".")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
