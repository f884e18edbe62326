package problem

import (
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"

	josejson "github.com/go-jose/go-jose/v4/json"

	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// A decoder's own error text is written for Go programmers: encoding/json
// names the Go struct and type it decodes into ("cannot unmarshal string
// into Go struct field payload.identifiers of type []acme.Identifier"),
// encoding/asn1 prints its Go field parameters. A client is told instead
// what was wrong in its document's terms: the member, and the JSON type it
// must have; the DER structure that does not parse.

// JSONFault says what is wrong with a JSON document a client sent, err
// being its decoder's error (encoding/json's or go-jose's), as a phrase to
// follow the document's name: "has a string where \"identifiers\" takes
// an array", "is not valid JSON: unexpected end of JSON input".
func JSONFault(err error) string {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return typeFault(te.Value, te.Field, te.Type)
	}
	if te, ok := errors.AsType[*josejson.UnmarshalTypeError](err); ok {
		return typeFault(te.Value, "", te.Type)
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return "is not valid JSON: " + Clip(se.Error())
	}
	if se, ok := errors.AsType[*josejson.SyntaxError](err); ok {
		return "is not valid JSON: " + Clip(se.Error())
	}
	if _, ok := errors.AsType[base64.CorruptInputError](err); ok {
		return "has a member that is not base64url"
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "unexpected end of JSON input"):
		return "is not valid JSON: " + msg
	case strings.Contains(msg, "duplicate key"):
		// go-jose's, naming the key as sent: its name is not repeated.
		return "has a member twice"
	case strings.HasPrefix(msg, joseErrorPrefix):
		// A JWK's own checks ("unsupported key type/format", "invalid
		// EC public key, wrong length for x"): JWK terms already.
		return "cannot be parsed: " + Clip(strings.TrimPrefix(msg, joseErrorPrefix))
	}
	return "is not the JSON expected"
}

// joseErrorPrefix starts the errors go-jose writes itself.
const joseErrorPrefix = "go-jose/go-jose: "

// typeFault is JSONFault's phrase for a value of the wrong JSON type:
// value is the decoder's name for what it found ("number", "number -5",
// "string"…), field the member's path ("" when not known), typ the Go type
// it would have been decoded into, named here by the JSON type it takes.
func typeFault(value, field string, typ reflect.Type) string {
	found := value
	if i := strings.IndexByte(found, ' '); i >= 0 {
		found = found[:i] // "number -5": the number is the client's, not needed
	}
	found = jsonTypeName(found)
	want := "another type"
	if typ != nil {
		want = jsonKind(typ)
	}
	if field == "" {
		return "has " + found + " where " + want + " belongs"
	}
	return "has " + found + " where " + Quote(field) + " takes " + want
}

// jsonTypeName is a decoder's name of a JSON value's type with its
// article.
func jsonTypeName(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "bool":
		return "a boolean"
	case "string", "number":
		return "a " + v
	}
	return "a value"
}

// jsonKind is the JSON type a Go type is decoded from, with its article.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}

// DERFault says what is wrong with a DER structure a client sent (a CSR,
// a certificate), err being crypto/x509's error, as a phrase to follow its
// name: x509's own words ("is malformed: x509: malformed tbs
// certificate"), or, for an error of encoding/asn1, whose text prints Go
// field parameters, only that its DER does not parse.
func DERFault(err error) string {
	var se asn1.StructuralError
	var sy asn1.SyntaxError
	if errors.As(err, &se) || errors.As(err, &sy) || strings.HasPrefix(err.Error(), "asn1:") {
		return "is not well-formed DER"
	}
	return "cannot be parsed: " + Clip(err.Error())
}

// MaxEcho bounds, in bytes, what of one value a client sent a problem
// repeats: more than the longest identifier (a DNS name has at most 253
// octets), a profile name or a date-time, so that a problem names such a
// value whole, while a value of tens of KiB is not echoed back at length.
const MaxEcho = 256

// cutMark ends a value Clip or Quote cut.
const cutMark = "…"

// Clip bounds s, text a problem's detail repeats, to MaxEcho bytes: a
// longer s is cut at a UTF-8 character boundary and ends with "…".
func Clip(s string) string {
	if head, cut := echoed(s); cut {
		return head + cutMark
	}
	return s
}

// Quote is a value a client sent, for a problem's detail: cut as Clip
// cuts it, then quoted as Go quotes a string, so that control
// characters, invisible formatting characters and bytes that are not
// UTF-8 are written as escapes, never as themselves.
func Quote(s string) string {
	if head, cut := echoed(s); cut {
		return strconv.Quote(head) + cutMark
	}
	return strconv.Quote(s)
}

// echoed is what of s a problem repeats: s whole when it fits MaxEcho,
// else its head, cut at a UTF-8 character boundary to leave room for
// cutMark (cut true).
func echoed(s string) (head string, cut bool) {
	return textcut.Head(s, MaxEcho, len(cutMark))
}
