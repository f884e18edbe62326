package relay

import (
	"cmp"
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
)

// secrets is what of a relay's configuration must never be shown — in a
// log line, an error, a job's last error, an order's failure detail —
// and how to take it out of a text bound for one: the upstream
// directory URL's user and password (also as the Basic credentials Go's
// HTTP client sends for them) and its query's values (an upstream
// behind a gateway may take a token there), and the EAB HMAC key. Every
// text the signer writes passes text (or err, for an error it returns),
// so that there is one redaction, not one per call site.
//
// withoutURLSecrets alone cuts a URL it recognizes in a text; it cannot
// recognize one quoted with characters that end a URL in prose (a token
// with a parenthesis, a quote, a blank: Go's URL parser takes them in a
// query), nor a secret out of its URL (an upstream echoing the token,
// decoded, in a problem's detail). The values themselves are therefore
// replaced first, in each form they take in a text: as configured,
// percent-decoded, and percent-encoded as Go's URL and query encoders
// write them.
type secrets struct {
	// directory is the directory URL as it may be shown: no user and
	// password, the names of its query's parameters only.
	directory string
	hide      *strings.Replacer // nil: nothing known to hide
	// upstreamHost is the directory URL's host[:port] (clientText).
	upstreamHost string
}

// minSecretLen is the length of the shortest value replaced wherever it
// occurs: a shorter one (a query's "v=2") would take common words and
// numbers out of every text, and is no secret worth the name. Where it
// is part of a URL the text quotes, withoutURLSecrets cuts it anyway.
const minSecretLen = 6

// redactedValue stands in for a secret value: URL characters only, so
// that withoutURLSecrets still reads a URL it was in to its end.
const redactedValue = "REDACTED"

// newSecrets is the secrets of a relay whose directory is directory (a
// URL that parses) and whose EAB HMAC key is macKey ("" for none).
func newSecrets(directory, macKey string) secrets {
	u, err := url.Parse(directory)
	if err != nil {
		// New refuses such a directory; nothing of it is shown.
		return secrets{directory: "(a directory URL that does not parse)"}
	}
	shown := *u
	shown.User, shown.Fragment, shown.RawFragment = nil, "", ""
	shown.RawQuery = queryNames(u.RawQuery)
	shown.ForceQuery = false
	r := secrets{directory: shown.String(), upstreamHost: u.Host}

	var pairs []string
	// The directory whole, as configured (acmez quotes it so) and as
	// Go's HTTP client writes it (url.Error: the password as ***, or as
	// URL.Redacted writes it).
	if r.directory != directory {
		for _, form := range []string{directory, u.String(), u.Redacted(), passwordStripped(u)} {
			pairs = append(pairs, form, r.directory)
		}
	}
	var values []string
	if u.User != nil {
		pw, ok := u.User.Password()
		if ok {
			values = append(values, pw)
		} else {
			// A user alone is a token (https://TOKEN@host/).
			values = append(values, u.User.Username())
		}
		// Go's HTTP client sends the userinfo as Basic credentials, which
		// a gateway's error page may quote from the Authorization header.
		basic := []byte(u.User.Username() + ":" + pw)
		values = append(values, base64.StdEncoding.EncodeToString(basic), base64.RawStdEncoding.EncodeToString(basic))
	}
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		if _, v, ok := strings.Cut(pair, "="); ok && v != "" {
			values = append(values, v)
			if dec, err := url.QueryUnescape(v); err == nil {
				values = append(values, dec)
			}
		}
	}
	if macKey != "" {
		values = append(values, macKey)
		if raw, err := base64.RawURLEncoding.DecodeString(macKey); err == nil {
			values = append(values, base64.URLEncoding.EncodeToString(raw), base64.StdEncoding.EncodeToString(raw),
				base64.RawStdEncoding.EncodeToString(raw))
		}
	}
	for _, v := range values {
		if len(v) < minSecretLen {
			continue
		}
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v), strings.TrimPrefix(url.UserPassword("", v).String(), ":")} {
			pairs = append(pairs, form, redactedValue)
		}
	}
	if len(pairs) == 0 {
		return r
	}
	// Longest first: a form that holds another is replaced whole.
	type pair struct{ old, new string }
	ps := make([]pair, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		ps = append(ps, pair{pairs[i], pairs[i+1]})
	}
	slices.SortStableFunc(ps, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	pairs = pairs[:0]
	for _, p := range ps {
		pairs = append(pairs, p.old, p.new)
	}
	r.hide = strings.NewReplacer(pairs...)
	return r
}

// text is s with the relay's secrets, and the secrets of every URL it
// quotes, taken out.
func (r secrets) text(s string) string {
	if r.hide != nil {
		s = r.hide.Replace(s)
	}
	return withoutURLSecrets(s)
}

// reasonOf is err's text as a job's last error and a log line keep it.
func (r secrets) reasonOf(err error) string { return r.text(err.Error()) }

// err is err with its text redacted; errors.Is and errors.As still see
// what it wraps.
func (r secrets) err(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err: err, text: r.reasonOf(err)}
}

// redactedError is an error whose text is its cause's, redacted.
type redactedError struct {
	err  error
	text string
}

func (e redactedError) Error() string { return e.text }
func (e redactedError) Unwrap() error { return e.err }

// queryNames is a raw query cut to the names of its parameters.
func queryNames(query string) string {
	var names []string
	for pair := range strings.SplitSeq(query, "&") {
		if name, _, _ := strings.Cut(pair, "="); name != "" {
			names = append(names, name)
		}
	}
	return strings.Join(names, "&")
}

// passwordStripped is u as Go's HTTP client quotes it in its errors
// (net/http's stripPassword): the user decoded, the password ***.
func passwordStripped(u *url.URL) string {
	if _, ok := u.User.Password(); !ok {
		return u.String()
	}
	return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
}
