package localca

import (
	"encoding/json"
	"reflect"
	"strconv"

	"github.com/caddyserver/caddy/v2"
)

// Config is the JSON of the local_ca signer.
type Config struct {
	// CA is the id of a CA in Caddy's pki app; default "local". Ignored
	// when Cert and Key are set.
	CA string `json:"ca,omitempty"`
	// Cert and Key are PEM files of an issuing CA (Cert may hold the chain
	// above it too), used instead of a Caddy pki CA.
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// Lifetime of issued leaves; default 7 days.
	Lifetime Duration `json:"lifetime,omitempty"`
}

// Duration is a caddy.Duration (a string in Caddy's syntax, "7d", or a
// number of nanoseconds) whose refusal names its key. caddy.Duration's
// own error ("time: invalid duration") names neither the key nor, for
// days, the value written ("100000000d" reads as "2400000000h"); a
// *json.UnmarshalTypeError is completed by the decoder with the field's
// path ("… into Go struct field LocalCA.Config.lifetime …").
type Duration caddy.Duration

// UnmarshalJSON reads a Duration.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := caddy.ParseDuration(s)
		if err != nil {
			return &json.UnmarshalTypeError{Value: strconv.Quote(s) + ", which is not a duration (such as 7d, 12h),", Type: reflect.TypeFor[Duration]()}
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return &json.UnmarshalTypeError{Value: string(b) + ", which is not a duration (a string such as \"7d\" or a number of nanoseconds),", Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(n)
	return nil
}
