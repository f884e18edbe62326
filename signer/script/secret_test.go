package script

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// secretValue is what the configuration passes the program in SIGN_TOKEN.
const secretValue = "tok-9f86d081884c7d65"

// A program that prints a value its configuration passed it (a failing
// `curl -u user:$TOKEN -v`) has it taken out of everything its output
// reaches: the job's outcome (its last error), what the Settler records
// (the order's failure detail and audit row), the logs, a revocation's
// error. The operator still reads which variable it was.
func TestAConfiguredSecretTheProgramPrintsIsKeptOutOfWhatIsStoredAndLogged(t *testing.T) {
	leak := `echo "curl: (22) 401 for https://signer:$SIGN_TOKEN@pki.example.com/sign" >&2; `
	tests := []struct {
		name string
		body string
		// abandon gives the job up after its run, as the runner does once
		// its attempts are spent.
		abandon bool
		revoke  bool
	}{
		{name: "a failed run", body: leak + "exit 1"},
		{name: "a failed run given up", body: leak + "exit 1", abandon: true},
		{name: "a temporary failure", body: leak + "exit 75"},
		{name: "a refusal", body: `echo "rejectedIdentifier: not with token $SIGN_TOKEN" >&2; exit 2`},
		{name: "a refusal of dates the order did not ask for", body: `echo "badValidity: token $SIGN_TOKEN" >&2; exit 2`},
		{name: "a failed revocation", body: leak + "exit 1", revoke: true},
		{name: "a refused revocation", body: leak + "exit 2", revoke: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			core, logs := observer.New(zap.DebugLevel)
			b := newBenchLogging(t, Options{Command: []string{program(t, "cat >/dev/null; "+tt.body)}, Revoke: true,
				Env: map[string]string{"SIGN_TOKEN": secretValue}}, zap.New(core))
			req, key := b.finalized(t, "a.example.com")
			var seen []string // everything the run's output reached
			if tt.revoke {
				ca := newTestCA(t)
				err := b.s.Revoke(ctx, ca.leaf(t, key.Public(), []string{"a.example.com"}), nil)
				if err == nil {
					t.Fatal("the revocation succeeded")
				}
				seen = append(seen, err.Error())
			} else {
				if _, err := b.s.Issue(ctx, req); err != nil {
					t.Fatal(err)
				}
				j := b.job(t, req.OrderID)
				out := b.s.RunJob(ctx, j)
				seen = append(seen, out.String())
				if tt.abandon {
					j.LastError = out.String()
					b.s.AbandonJob(ctx, j, "attempts exhausted")
				}
			}
			seen = append(seen, b.settler.failed[req.OrderID], b.settler.refused[req.OrderID].detail)
			for _, e := range logs.All() {
				seen = append(seen, e.Message, fmt.Sprint(e.ContextMap()))
			}
			all := strings.Join(seen, "\n")
			if strings.Contains(all, secretValue) || strings.Contains(all, secretValue[:8]) {
				t.Errorf("the secret is in what the run left:\n%s", all)
			}
			if !strings.Contains(all, "[redacted env SIGN_TOKEN]") {
				t.Errorf("what the run left does not say what was redacted:\n%s", all)
			}
		})
	}
}
