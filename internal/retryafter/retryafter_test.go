package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParseReadsDelaySecondsAndDatesCappedAndNeverNegative(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const limit = time.Hour
	tests := []struct {
		name   string
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"ok/seconds", "120", 2 * time.Minute, true},
		{"ok/zero", "0", 0, true},
		{"ok/seconds over the limit are the limit", "7200", limit, true},
		{"ok/seconds that would wrap a Duration are the limit", "9223372037", limit, true},
		{"ok/seconds too large for an int are the limit", "184467440737095516160", limit, true},
		{"ok/a date ahead", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"ok/a date past is no wait", now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"ok/a date far ahead is the limit", now.AddDate(10, 0, 0).Format(http.TimeFormat), limit, true},
		{"fail/empty", "", 0, false},
		{"fail/negative seconds", "-5", 0, false},
		{"fail/a huge negative", "-184467440737095516160", 0, false},
		{"fail/neither form", "soon", 0, false},
		{"fail/digits then a letter", "18700000000000000000A", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Parse(tc.in, now, limit)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
