package caddyacmeproxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
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
	eachSourceFile(t, func(path string, src []byte) {
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
	})
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
	eachSourceFile(t, func(path string, src []byte) {
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
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
	})
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

// An operator sets alerts by level as the README files each event: the
// audit events at info (two at warn), the others in a list per level.
// Every event the code logs is in exactly one of those places, and every
// line naming it is written at the level the README gives it.
func TestEveryLogEventIsWrittenAtTheLevelTheREADMEGivesIt(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := readmeLogLevels(t, string(readme))
	logged := codeLogLevels(t)
	if len(documented) < 50 || len(logged) < 50 {
		t.Fatalf("the README files %d events by level and the code logs %d; the parsers no longer find them", len(documented), len(logged))
	}
	for event, levels := range logged {
		want, ok := documented[event]
		if !ok {
			t.Errorf("the event %q, logged at %v, is in none of the README's lists by level", event, sortedKeys(levels))
			continue
		}
		for level, where := range levels {
			if level != want {
				t.Errorf("the event %q is logged at %s (%s); the README files it under %s", event, level, where, want)
			}
		}
	}
	for event, level := range documented {
		if logged[event] == nil {
			t.Errorf("the README files the event %q under %s; no log line of the code names it", event, level)
		}
	}
}

// readmeLogLevels reads the README's log events by level: the audit events'
// sentence ("at `info` (`a` and `b` at `warn`): `a`, `b`, `c` …") and the
// bulleted lists that follow it. Text in parentheses, which explains an
// event and may name others, is left out of the lists.
func readmeLogLevels(t *testing.T, readme string) map[string]string {
	t.Helper()
	at := func(phrase string) int {
		loc := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(phrase), " ", `\s+`)).FindStringIndex(readme)
		if loc == nil {
			t.Fatalf("the README no longer says %q", phrase)
		}
		return loc[0]
	}
	i, j := at("These audit events are logged"), at("The others, by level:")
	backticked := regexp.MustCompile("`([a-z0-9_]+)`")
	levels := map[string]string{}
	file := func(event, level string) {
		if prev, ok := levels[event]; ok && prev != level {
			t.Errorf("the README files the event %q under both %s and %s", event, prev, level)
		}
		levels[event] = level
	}
	audit := readme[i:j]
	open, end := strings.Index(audit, "("), strings.Index(audit, "):")
	if open < 0 || end < open {
		t.Fatalf("the README's audit events' sentence no longer reads \"at `info` (… at `warn`): …\": %q", audit)
	}
	for _, m := range backticked.FindAllStringSubmatch(outsideParentheses(audit[end+1:]), -1) {
		file(m[1], "info")
	}
	for _, m := range backticked.FindAllStringSubmatch(audit[open:end], -1) {
		if m[1] != "warn" {
			levels[m[1]] = "warn" // the exceptions the parentheses name
		}
	}
	others := readme[j:]
	if k := strings.Index(others, "\n#"); k >= 0 {
		others = others[:k]
	}
	bullets := strings.Split(others, "\n- `")[1:]
	if len(bullets) != 4 {
		t.Fatalf("the README lists the other events in %d bullets; want one per level (error, warn, info, debug)", len(bullets))
	}
	for _, b := range bullets {
		level, list, _ := strings.Cut(b, "`")
		for _, m := range backticked.FindAllStringSubmatch(outsideParentheses(list), -1) {
			file(m[1], level)
		}
	}
	return levels
}

// outsideParentheses is s without the text in (possibly nested)
// parentheses.
func outsideParentheses(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// codeLogLevels finds every log line of the code that names an event
// (zap.String("event", …) among its fields, its value a literal or a
// constant of the acme package) and returns, per event, the levels it is
// written at, each with one place it is written so.
func codeLogLevels(t *testing.T) map[string]map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	consts := map[string]string{} // the acme package's string constants
	pkgs, err := filepath.Glob("acme/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range pkgs {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for k, name := range vs.Names {
					if k < len(vs.Values) {
						if lit, ok := vs.Values[k].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	levels := map[string]map[string]string{}
	eachSourceFile(t, func(path string, src []byte) {
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		// eventIn is the event a field, or fields, name: a zap.String("event", …)
		// within n, or in the fields a variable of the function was given
		// (fields := []zap.Field{zap.String("event", …), …}).
		var vars map[string]ast.Node
		var eventIn func(n ast.Node) string
		eventIn = func(n ast.Node) (event string) {
			if id, ok := n.(*ast.Ident); ok && vars[id.Name] != nil {
				return eventIn(vars[id.Name])
			}
			ast.Inspect(n, func(n ast.Node) bool {
				fc, ok := n.(*ast.CallExpr)
				if !ok || len(fc.Args) != 2 || event != "" {
					return event == ""
				}
				if lit, ok := fc.Args[0].(*ast.BasicLit); !ok || lit.Value != `"event"` {
					return true
				}
				switch v := fc.Args[1].(type) {
				case *ast.BasicLit:
					event, _ = strconv.Unquote(v.Value)
				case *ast.SelectorExpr:
					if x, ok := v.X.(*ast.Ident); ok && x.Name == "acme" {
						event = consts[v.Sel.Name]
					}
				}
				if event == "" {
					t.Errorf("%s: an event this test cannot read; name it with a literal or an acme constant", fset.Position(fc.Pos()))
					event = "?"
				}
				return false
			})
			return event
		}
		for _, decl := range f.Decls {
			vars = map[string]ast.Node{}
			ast.Inspect(decl, func(n ast.Node) bool {
				if as, ok := n.(*ast.AssignStmt); ok && as.Tok == token.DEFINE && len(as.Lhs) == len(as.Rhs) {
					for k, lhs := range as.Lhs {
						if id, ok := lhs.(*ast.Ident); ok {
							if _, ok := as.Rhs[k].(*ast.CompositeLit); ok {
								vars[id.Name] = as.Rhs[k]
							}
						}
					}
				}
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !isMessage(call.Args[0]) {
					return true
				}
				level := map[string]string{"Debug": "debug", "Info": "info", "Warn": "warn", "Error": "error"}[sel.Sel.Name]
				if level == "" {
					return true
				}
				for _, a := range call.Args[1:] {
					if event := eventIn(a); event != "" {
						if levels[event] == nil {
							levels[event] = map[string]string{}
						}
						levels[event][level] = fset.Position(call.Pos()).String()
					}
				}
				return true
			})
		}
	})
	return levels
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The README lists the events an audit search takes and those a notify
// destination subscribes to; an operator writes them into a query or a
// config. Each list is the code's, in its order.
func TestTheREADMEsListsOfEventsAreTheCodes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	backticked := regexp.MustCompile("`([a-z0-9_]+)`")
	tests := []struct {
		name, from, to string // the list lies between from and to
		want           []string
	}{
		{"the audit search's events", "| the audit trail (`outcome` one of `success`, `failure`, `refused`, `interrupted`; `event` one of ", "; another is `400` with the list)", acme.Events},
		{"the notify destinations' events", "Events: ", ". Every destination takes `events`", notify.Events},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rest, ok := strings.Cut(text, tt.from)
			list, _, ok2 := strings.Cut(rest, tt.to)
			if !ok || !ok2 {
				t.Fatalf("the README no longer has %q … %q", tt.from, tt.to)
			}
			var got []string
			for _, m := range backticked.FindAllStringSubmatch(list, -1) {
				got = append(got, m[1])
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("the README lists %q; the code %q", got, tt.want)
			}
		})
	}
}

// The README's Metrics paragraph names the code's metrics, no more: an
// operator's dashboard built on a name the code dropped or renamed would
// show nothing. And revocations_refused_total's reasons are the code's.
func TestTheREADMEsMetricsAreTheCodes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	_, para, ok := strings.Cut(text, "Metrics (`caddy_acme_proxy_*` on Caddy's `/metrics`): ")
	if !ok {
		t.Fatal("the README no longer has its Metrics paragraph")
	}
	para, _, _ = strings.Cut(para, " Logs go through")
	backticked := regexp.MustCompile("`([a-z0-9_]+)`")
	documented := map[string]bool{}
	for _, m := range backticked.FindAllStringSubmatch(outsideParentheses(para), -1) {
		documented[m[1]] = true
	}
	code := map[string]bool{}
	metric := regexp.MustCompile(`(?:counter|histogram)\("([a-z0-9_]+)"|BuildFQName\(metricsNamespace, metricsSubsystem, "([a-z0-9_]+)"\)`)
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metric.FindAllStringSubmatch(string(src), -1) {
		code[m[1]+m[2]] = true
	}
	if len(code) < 14 {
		t.Fatalf("found %d metrics in metrics.go; the pattern no longer matches how it names them", len(code))
	}
	for name := range documented {
		if !code[name] {
			t.Errorf("the README names the metric %q; the code has none of that name", name)
		}
	}
	for name := range code {
		if !documented[name] {
			t.Errorf("the metric %q is not in the README's Metrics paragraph", name)
		}
	}

	_, refused, ok := strings.Cut(para, "`revocations_refused_total` (by reason: ")
	if !ok {
		t.Fatal("the README no longer lists revocations_refused_total's reasons")
	}
	refused, _, _ = strings.Cut(refused, ")")
	var got []string
	for _, m := range backticked.FindAllStringSubmatch(refused, -1) {
		got = append(got, m[1])
	}
	// The reasons are the authority's Refusal… constants.
	f, err := parser.ParseFile(token.NewFileSet(), "acmeproxy/authority/refusals.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, decl := range f.Decls {
		if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.CONST {
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if len(vs.Names) == 1 && len(vs.Values) == 1 && strings.HasPrefix(vs.Names[0].Name, "Refusal") {
					if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						want = append(want, v)
					}
				}
			}
		}
	}
	if len(want) < 5 {
		t.Fatalf("found %d Refusal constants in refusals.go; the reasons are named otherwise now", len(want))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the README lists revocations_refused_total's reasons as %q; the code's are %q", got, want)
	}
}

// Every word the Caddyfile adapter takes as a setting (a case of its
// switches on a block's words, or a word compared with one) is in the
// README's Caddyfiles or code spans: a setting added to the adapter is
// documented with it.
func TestEveryCaddyfileSettingOfTheAdapterIsInTheREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The words the README shows as code: its fenced blocks and its spans.
	shown := map[string]bool{}
	word := regexp.MustCompile(`[a-z][a-z0-9_-]*`)
	for _, code := range regexp.MustCompile("(?s)```.*?```|`[^`\n]+`").FindAllString(string(readme), -1) {
		for _, w := range word.FindAllString(code, -1) {
			shown[w] = true
		}
	}
	files, err := filepath.Glob("caddyfile/*.go")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, path := range append(files, root...) {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			fd, ok := n.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				return true
			}
			// Only what reads a Caddyfile: a function given a Dispenser or
			// a Helper.
			reads := false
			for _, p := range fd.Type.Params.List {
				if s := typeName(p.Type); s == "caddyfile.Dispenser" || s == "httpcaddyfile.Helper" {
					reads = true
				}
			}
			if !reads {
				return false
			}
			var literals []*ast.BasicLit
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch v := n.(type) {
				case *ast.CaseClause:
					for _, e := range v.List {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							literals = append(literals, lit)
						}
					}
				case *ast.BinaryExpr:
					if lit, ok := v.Y.(*ast.BasicLit); ok && lit.Kind == token.STRING && (v.Op == token.EQL || v.Op == token.NEQ) {
						literals = append(literals, lit)
					}
				}
				return true
			})
			for _, lit := range literals {
				w, _ := strconv.Unquote(lit.Value)
				if !word.MatchString(w) || word.FindString(w) != w {
					continue // not a word: "", "{", a path
				}
				checked++
				if !shown[w] {
					t.Errorf("%s: the Caddyfile adapter takes %q, which no Caddyfile or code span of the README shows", fset.Position(lit.Pos()), w)
				}
			}
			return false
		})
	}
	if checked < 50 {
		t.Fatalf("found %d settings in the Caddyfile adapter; the walk no longer finds how it reads them", checked)
	}
}

// typeName writes a parameter's type as its source does, less a pointer.
func typeName(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.StarExpr:
		return typeName(v.X)
	case *ast.SelectorExpr:
		if x, ok := v.X.(*ast.Ident); ok {
			return x.Name + "." + v.Sel.Name
		}
	}
	return ""
}

// Every JSON member the README writes ("key": …) — of the config, the
// admin API's answers, a script's or a webhook's payload — is one the code
// reads or writes: a field's json tag. The names of a map's entries (a
// certificate profile's name, an env variable's) are the operator's, not
// fields, and are left out.
func TestEveryJSONMemberTheREADMENamesIsAFieldOfTheCode(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`"(env|certificate_profiles)": \{"[^"]+":`).ReplaceAllString(string(readme), `"$1": {`)
	tags := map[string]bool{}
	tag := regexp.MustCompile("json:\"([a-zA-Z_]+)[,\"]")
	eachSourceFile(t, func(_ string, src []byte) {
		for _, m := range tag.FindAllStringSubmatch(string(src), -1) {
			tags[m[1]] = true
		}
	})
	members := regexp.MustCompile(`"([a-zA-Z_]+)":`).FindAllStringSubmatch(text, -1)
	if len(members) < 50 {
		t.Fatalf("found %d JSON members in the README; it writes more", len(members))
	}
	for _, m := range members {
		if !tags[m[1]] {
			t.Errorf("the README writes the JSON member %q; no field of the code is tagged so", m[1])
		}
	}
}

// An operator filters jobs by kind and reads the jobs metrics by it: the
// README's list of job kinds is the code's — every constant naming a job
// kind (…Kind = "…", the kinds of handlers) and every recurring job's name.
func TestTheREADMEsJobKindsAreTheCodes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	_, list, ok := strings.Cut(text, "Job kinds ")
	list, _, ok2 := strings.Cut(list, " A POST's JSON body")
	if !ok || !ok2 {
		t.Fatal("the README no longer lists the job kinds before its paragraph on a POST's JSON body")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(outsideParentheses(list), -1) {
		documented[m[1]] = true
	}
	kind := regexp.MustCompile(`(?m)^\s*(?:const\s+)?[A-Za-z]*Kind\s*=\s*"([a-z_]+)"|Periodic\{Name:\s*"([a-z_]+)"`)
	code := map[string]string{}
	eachSourceFile(t, func(path string, src []byte) {
		for _, m := range kind.FindAllStringSubmatch(string(src), -1) {
			code[m[1]+m[2]] = path
		}
	})
	if len(code) < 12 {
		t.Fatalf("found %d job kinds in the code; the pattern no longer matches how it names them", len(code))
	}
	for k, path := range code {
		if !documented[k] {
			t.Errorf("the job kind %q (%s) is not in the README's list of job kinds", k, path)
		}
	}
	for k := range documented {
		if code[k] == "" {
			t.Errorf("the README lists the job kind %q; the code has none", k)
		}
	}
}

// eachSourceFile calls fn with the path and contents of every non-test Go
// file of the module, testdata and hidden directories left out.
func eachSourceFile(t *testing.T, fn func(path string, src []byte)) {
	t.Helper()
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
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fn(path, src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
