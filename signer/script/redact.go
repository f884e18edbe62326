package script

import (
	"cmp"
	"slices"
	"strings"
)

// minRedacted is the length of the shortest value redacted from the
// program's output: a shorter one ("1", "on", "/srv") is no secret worth
// the name, and replacing it wherever it occurs would mangle what the
// operator reads.
const minRedacted = 6

// redactor takes out of the program's output the values of the variables
// the configuration sets (Options.Env): a program may pass one on in its
// diagnostics (a failing `curl -u user:$TOKEN -v`), and its output is
// stored and logged (the job's last error, the order's failure detail,
// the audit trail, notifications). The values PATH and the ACME_PROXY_
// variables get from elsewhere are not redacted. A value is taken out as
// written only: the program's encodings of it (base64, URL escapes) are
// not recognized.
type redactor struct {
	r *strings.Replacer // nil: nothing to redact
	// values are the redacted values, longest first.
	values []string
}

// newRedactor redacts the values of env of minRedacted bytes or more,
// each replaced by "[redacted env NAME]"; where one value holds another,
// the longer is replaced.
func newRedactor(env map[string]string) redactor {
	type kv struct{ k, v string }
	var vars []kv
	for k, v := range env {
		if len(v) >= minRedacted {
			vars = append(vars, kv{k, v})
		}
	}
	if len(vars) == 0 {
		return redactor{}
	}
	// strings.Replacer tries its pairs in order at each position: the
	// longest value first, and by name among equals so that one value
	// set twice is always named alike.
	slices.SortFunc(vars, func(a, b kv) int {
		return cmp.Or(cmp.Compare(len(b.v), len(a.v)), cmp.Compare(a.k, b.k))
	})
	pairs := make([]string, 0, 2*len(vars))
	values := make([]string, len(vars))
	for i, e := range vars {
		pairs = append(pairs, e.v, "[redacted env "+e.k+"]")
		values[i] = e.v
	}
	return redactor{r: strings.NewReplacer(pairs...), values: values}
}

// redact is out with every configured value replaced. cut says out was
// cut short (a cap): a value it ends in the middle of, which the
// replacer cannot recognize, is dropped from its end too.
func (d redactor) redact(out []byte, cut bool) []byte {
	if d.r == nil || len(out) == 0 {
		return out
	}
	s := d.r.Replace(string(out))
	if cut {
		for _, v := range d.values {
			for n := len(v) - 1; n > 0; n-- {
				if strings.HasSuffix(s, v[:n]) {
					s = s[:len(s)-n]
					break
				}
			}
		}
	}
	return []byte(s)
}
