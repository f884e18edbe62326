package scriptout

import (
	"cmp"
	"slices"
	"strings"
)

// MinRedacted is the length of the shortest value redacted from a
// program's output: a shorter one ("1", "on", "/srv") is no secret worth
// the name, and replacing it wherever it occurs would mangle what the
// operator reads.
const MinRedacted = 6

// Redactor takes out of a program's output the values its configuration
// gives it (a script signer's env, a notify script's arguments): a
// program may pass one on in its diagnostics (a failing `curl -u
// user:$TOKEN -v`), and its output is stored and logged (the job's last
// error, the order's failure detail, the audit trail, notifications). A
// value is taken out as written only: the program's encodings of it
// (base64, URL escapes) are not recognized. The zero Redactor redacts
// nothing.
type Redactor struct {
	r *strings.Replacer // nil: nothing to redact
	// values are the redacted values, longest first.
	values []string
}

// NewRedactor redacts the values of secrets of MinRedacted bytes or
// more, each replaced by "[redacted NAME]", NAME its key ("env TOKEN");
// where one value holds another, the longer is replaced.
func NewRedactor(secrets map[string]string) Redactor {
	type kv struct{ k, v string }
	var vars []kv
	for k, v := range secrets {
		if len(v) >= MinRedacted {
			vars = append(vars, kv{k, v})
		}
	}
	if len(vars) == 0 {
		return Redactor{}
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
		pairs = append(pairs, e.v, "[redacted "+e.k+"]")
		values[i] = e.v
	}
	return Redactor{r: strings.NewReplacer(pairs...), values: values}
}

// Redact is out with every configured value replaced. cut says out was
// cut short (a cap): a value it ends in the middle of, which the
// replacer cannot recognize, is dropped from its end too.
func (d Redactor) Redact(out []byte, cut bool) []byte {
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
