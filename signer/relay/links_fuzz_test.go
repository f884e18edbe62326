package relay

import (
	"slices"
	"strings"
	"testing"
)

// fuzzLink is one link of a Link header the test writes (RFC 8288 §3).
type fuzzLink struct {
	target string   // the URI-Reference between < and >
	rels   []string // the relation types of its rel parameter
	title  string   // a quoted title parameter, with whatever it holds
}

// fuzzTarget makes s a target a Link header can carry: a URI-Reference
// holds no < or > (RFC 3986), nor a space or a control character.
func fuzzTarget(s string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '<' || r == '>' || r >= 0x7f {
			return -1
		}
		return r
	}, s)
}

// fuzzRels makes s the relation types of a rel parameter: the runs of
// tchar (RFC 9110 §5.6.2) in it.
func fuzzRels(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
	})
}

// quoted is s as a quoted-string (RFC 9110 §5.6.4): " and \ escaped,
// control characters left out.
func quoted(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' && c != '\t' || c == 0x7f:
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// render writes l as a link-value; shape picks among the spellings RFC
// 8288 allows: where the title goes, white space around ";" and "=", an
// unquoted rel when it is one token, and the case of "rel".
func (l fuzzLink) render(shape uint8) string {
	ows := ""
	if shape&1 != 0 {
		ows = " \t"
	}
	rel := quoted(strings.Join(l.rels, " "))
	if len(l.rels) == 1 && shape&2 != 0 {
		rel = l.rels[0]
	}
	name := "rel"
	if shape&4 != 0 {
		name = "REL"
	}
	params := []string{name + ows + "=" + ows + rel}
	if l.title != "" {
		t := "title=" + quoted(l.title)
		if shape&8 != 0 {
			params = append([]string{t}, params...)
		} else {
			params = append(params, t)
		}
	}
	if len(l.rels) == 0 {
		params = params[len(params)-1:] // no rel at all
		if l.title == "" {
			params = nil
		}
	}
	s := "<" + l.target + ">"
	for _, p := range params {
		s += ows + ";" + ows + p
	}
	return s
}

// hasRel reports whether rels names rel; relation types compare without
// regard to case (RFC 8288 §2.1.1).
func hasRel(rels []string, rel string) bool {
	return slices.ContainsFunc(rels, func(r string) bool { return strings.EqualFold(r, rel) })
}

// FuzzLinkTargets checks the reading of an upstream's Link header, where
// the relay finds the issuers of a chain sent without them (rel="up",
// RFC 8555 §7.4.2). Whatever the header, a target found is one the
// header holds between < and >; and of a header written by the rules of
// RFC 8288, exactly the targets of the links whose rel names "up", in
// order, however the links are spelled.
func FuzzLinkTargets(f *testing.F) {
	for _, s := range []struct {
		header           string
		t1, rels1, t2    string
		rels2, title     string
		shape1, shape2   uint8
		oneValue, second bool
	}{
		{`<https://ca/dir>;rel="index", <https://ca/cert/1/1>;rel="up"`, "https://ca/cert/1/1", "up", "https://ca/dir", "index", "", 0, 0, true, true},
		{`<https://ca/alt/1>;title="x", <https://ca/up>;rel="up"`, "https://ca/alt/1", "alternate", "https://ca/up", "up", "x", 8, 0, true, true},
		{`<https://ca/up>; title="x"; rel="up"`, "/issuer", "up", "", "", `a", <https://evil>;rel="up`, 9, 0, true, false},
		{`<https://ca/up>;rel="alternate up"`, "https://ca/up", "alternate up", "https://ca/alt", "alternate", "", 0, 0, false, true},
		{`<https://ca/up> ; REL=UP`, "https://ca/up", "UP", "https://ca/x", "up-ish", "", 7, 2, true, true},
		{`<https://ca/a,b;c>;rel="up"`, "https://ca/a,b;c", "up", "", "", "", 0, 0, true, false},
		{`<a>;rel="up";rel="index", <b>;rel="index";rel="up"`, "a", "up", "b", "index", "", 0, 0, true, true},
		{`<a>;rel="up`, "", "", "", "", "", 0, 0, true, false},
		{`<a;rel="up"`, "", "", "", "", "", 0, 0, true, false},
		{`rel="up"`, "", "", "", "", "", 0, 0, true, false},
	} {
		f.Add(s.header, s.t1, s.rels1, s.t2, s.rels2, s.title, s.shape1, s.shape2, s.oneValue, s.second)
	}
	f.Fuzz(func(t *testing.T, header, t1, rels1, t2, rels2, title string, shape1, shape2 uint8, oneValue, second bool) {
		for _, got := range linkTargets([]string{header}, "up") {
			if strings.ContainsAny(got, "<>") || !strings.Contains(header, "<"+got+">") {
				t.Fatalf("Link %q: found target %q, which the header does not hold between < and >", header, got)
			}
		}

		links := []fuzzLink{{target: fuzzTarget(t1), rels: fuzzRels(rels1), title: title}}
		if second {
			links = append(links, fuzzLink{target: fuzzTarget(t2), rels: fuzzRels(rels2)})
		}
		var values, want []string
		for i, l := range links {
			v := l.render([]uint8{shape1, shape2}[i])
			if oneValue && len(values) > 0 {
				values[0] += "," + []string{"", " "}[shape1>>4&1] + v
			} else {
				values = append(values, v)
			}
			if hasRel(l.rels, "up") {
				want = append(want, l.target)
			}
		}
		if got := linkTargets(values, "up"); !slices.Equal(got, want) {
			t.Fatalf("Link %q: found targets %q, want %q", values, got, want)
		}
	})
}
