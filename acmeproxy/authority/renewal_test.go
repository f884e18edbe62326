package authority

import (
	"bytes"
	"encoding/base64"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// RFC 9773 §4.2: a window whose end does not follow its start is invalid
// and clients discard it; however short a certificate's life, ours is not.
func TestAComputedWindowNeverEndsBeforeItStarts(t *testing.T) {
	nb := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, life := range []time.Duration{0, time.Nanosecond, 99 * time.Second, 100 * time.Second, time.Hour, 90 * 24 * time.Hour} {
		for _, point := range []float64{0.01, 0.5, 2.0 / 3, 0.99} {
			w := ComputedWindow(nb, nb.Add(life), point)
			if !w.End.After(w.Start) {
				t.Errorf("life %v, point %v: window %v – %v ends before it starts", life, point, w.Start, w.End)
			}
		}
	}
}

func TestAWindowIsCentredAtThePointOfTheLifeItIsGiven(t *testing.T) {
	nb := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	w := ComputedWindow(nb, nb.Add(90*24*time.Hour), 2.0/3)
	// 90 days: centred at day 60, 1% (21h36m) either side.
	if want := nb.Add(60*24*time.Hour - 21*time.Hour - 36*time.Minute); !w.Start.Equal(want) {
		t.Errorf("start %v, want %v", w.Start, want)
	}
	if want := nb.Add(60*24*time.Hour + 21*time.Hour + 36*time.Minute); !w.End.Equal(want) {
		t.Errorf("end %v, want %v", w.End, want)
	}
}

func TestARenewalConfigRefusesAPointOutsideTheLifeAndANegativeRetryAfter(t *testing.T) {
	cases := []struct {
		name string
		cfg  RenewalConfig
		ok   bool
	}{
		{"ok/the defaults", RenewalConfig{}, true},
		{"ok/half way", RenewalConfig{Point: 0.5, RetryAfter: time.Hour}, true},
		{"fail/the end of the life", RenewalConfig{Point: 1}, false},
		{"fail/before the life", RenewalConfig{Point: -0.1}, false},
		{"fail/a negative retry", RenewalConfig{RetryAfter: -time.Second}, false},
		{"fail/a point that is not a number", RenewalConfig{Point: math.NaN()}, false},
		{"ok/a retry of a minute", RenewalConfig{RetryAfter: time.Minute}, true},
		{"ok/a retry of a day", RenewalConfig{RetryAfter: 24 * time.Hour}, true},
		{"fail/a retry under a minute, answered as Retry-After: 0", RenewalConfig{RetryAfter: time.Millisecond}, false},
		{"fail/a retry over a day", RenewalConfig{RetryAfter: 36500 * 24 * time.Hour}, false},
	}
	for _, tc := range cases {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// FuzzParseCertID: any string either is refused as a malformed problem or
// is a certID that renders back to exactly itself (one certificate has
// one certID) — or, for a serial written without DER's zero octet before
// a first octet whose high bit is set, to itself with that octet — with
// a positive serial of at most 20 octets.
func FuzzParseCertID(f *testing.F) {
	for _, s := range []string{"aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE", "AQ.AQ", "AQ.AA", "AQ.AIA", "AQ.AAE", "AQ.gA", ".AQ", "AQ.", "AQ", "AQ.AQ.AQ",
		"AQ==.AQ", "AR.AQ", "AQ.+A", "", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseCertID(s)
		if err != nil {
			if p, ok := problem.As(err); !ok || p.Status != 400 {
				t.Fatalf("ParseCertID(%q) failed with %v, not a 400 problem", s, err)
			}
			return
		}
		want := s
		akiPart, serialPart, _ := strings.Cut(s, ".")
		if serial, _ := base64.RawURLEncoding.DecodeString(serialPart); len(serial) > 0 && serial[0]&0x80 != 0 {
			want = akiPart + "." + base64.RawURLEncoding.EncodeToString(append([]byte{0}, serial...))
		}
		if got := id.String(); got != want {
			t.Fatalf("ParseCertID(%q) renders back as %q, want %q", s, got, want)
		}
		if len(id.Serial.Bytes()) > 20 || id.Serial.Cmp(new(big.Int)) <= 0 {
			t.Fatalf("ParseCertID(%q): serial %x is not a positive serial of at most 20 octets", s, id.Serial)
		}
		if aki, err := base64.RawURLEncoding.DecodeString(s[:bytes.IndexByte([]byte(s), '.')]); err != nil || !bytes.Equal(aki, id.AKI) {
			t.Fatalf("ParseCertID(%q) took key identifier %x from what is not its base64url", s, id.AKI)
		}
	})
}

// RFC 9773 §4.1 writes the serial as DER's content octets, with a zero
// octet before a first octet whose high bit is set; a client that writes
// the serial's magnitude alone (Go's big.Int.Bytes) names the same
// certificate, as Boulder and Pebble read it. Either form is the same
// certID.
func TestACertIDSerialWithoutItsSignOctetIsTheSameCertificate(t *testing.T) {
	cases := []struct {
		name, certID string
		serial       int64
		renders      string
	}{
		{"the DER form", "AQ.AIAB", 0x8001, "AQ.AIAB"},
		{"the magnitude alone", "AQ.gAE", 0x8001, "AQ.AIAB"},
		{"a serial whose high bit is clear", "AQ.fw", 0x7f, "AQ.fw"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ParseCertID(tc.certID)
			if err != nil {
				t.Fatalf("ParseCertID(%q): %v", tc.certID, err)
			}
			if id.Serial.Cmp(big.NewInt(tc.serial)) != 0 {
				t.Errorf("serial %x, want %x", id.Serial, tc.serial)
			}
			if got := id.String(); got != tc.renders {
				t.Errorf("renders as %q, want %q", got, tc.renders)
			}
		})
	}
}
