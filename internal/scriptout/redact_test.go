package scriptout

import "testing"

func TestTheConfiguredValuesAreTakenOutOfTheProgramsOutput(t *testing.T) {
	secrets := map[string]string{
		"env TOKEN":     "s3cr3t-t0ken",
		"env TOKEN_URL": "https://user:s3cr3t-t0ken@pki.example.com",
		"env PIN":       "12345", // too short to be redacted
		"env CERT":      "line one\nline two",
	}
	tests := []struct {
		name string
		out  string
		cut  bool // the output was capped
		want string
	}{
		{name: "a value is replaced wherever it occurs", out: "auth s3cr3t-t0ken failed; retry with s3cr3t-t0ken",
			want: "auth [redacted env TOKEN] failed; retry with [redacted env TOKEN]"},
		{name: "a value holding another is replaced whole", out: "GET https://user:s3cr3t-t0ken@pki.example.com/sign: 401",
			want: "GET [redacted env TOKEN_URL]/sign: 401"},
		{name: "a value shorter than six bytes is left alone", out: "PIN 12345 refused", want: "PIN 12345 refused"},
		{name: "a value over several lines is replaced", out: "read line one\nline two: bad", want: "read [redacted env CERT]: bad"},
		{name: "output cut inside a value loses that end", out: "auth s3cr3t-t0", cut: true, want: "auth "},
		{name: "output not cut keeps an end that merely looks like a value's start", out: "auth s3cr3t-t0", want: "auth s3cr3t-t0"},
		{name: "output without a value is unchanged", out: "openssl: unable to load CA key", cut: true, want: "openssl: unable to load CA key"},
	}
	d := NewRedactor(secrets)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(d.Redact([]byte(tt.out), tt.cut)); got != tt.want {
				t.Errorf("redacted %q; want %q", got, tt.want)
			}
		})
	}
	t.Run("without configured values nothing changes", func(t *testing.T) {
		if got := string(NewRedactor(nil).Redact([]byte("s3cr3t-t0ken"), true)); got != "s3cr3t-t0ken" {
			t.Errorf("redacted %q", got)
		}
	})
}
