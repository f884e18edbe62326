package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A waiting job an operator cancels through the admin API (on a front end
// with no signer worker, say) is cancelled at once, its Abandon owed to a
// runner of its kind: the answer, the job's JSON and the CLI say so, and
// the list filtered by abandon_owed lists it, until a runner gives it up.
func TestAJobCancelledWhileWaitingShowsItsAbandonOwedThroughTheAdminAPIAndTheCLI(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, nil)
	owed, _, err := q.Enqueue(ctx, jobs.Spec{Kind: "signer_issue", Key: "order-1", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	waiting, _, err := q.Enqueue(ctx, jobs.Spec{Kind: "signer_issue", Key: "order-2", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ts := adminServer(t, db)
	addr := ts.Listener.Addr().String()
	call := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+adminBase+path, nil)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	jobJSON := func(body string) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return v
	}
	status, body := call(http.MethodPost, "jobs/"+strconv.FormatInt(owed.ID, 10)+"/cancel")
	if v := jobJSON(body); status != http.StatusOK || v["status"] != "cancelled" || v["abandon_owed"] != true {
		t.Fatalf("cancel answered %d %s; want cancelled, abandon_owed true", status, body)
	}
	tests := []struct {
		name string
		id   int64
		want any // abandon_owed in the job's JSON
	}{
		{"ok/the cancelled job owes its abandon", owed.ID, true},
		{"ok/a waiting job owes nothing and says nothing of it", waiting.ID, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(http.MethodGet, "jobs/"+strconv.FormatInt(tc.id, 10))
			if v := jobJSON(body); status != http.StatusOK || v["abandon_owed"] != tc.want {
				t.Errorf("GET job %d: %d %s; want abandon_owed %v", tc.id, status, body, tc.want)
			}
		})
	}
	t.Run("ok/the list filtered by abandon_owed lists the cancelled job only", func(t *testing.T) {
		status, body := call(http.MethodGet, "jobs?abandon_owed=true")
		var p operator.Page[operator.JobView]
		if err := json.Unmarshal([]byte(body), &p); status != http.StatusOK || err != nil || len(p.Items) != 1 || p.Items[0].ID != owed.ID {
			t.Errorf("GET jobs?abandon_owed=true: %d %s; want job %d only", status, body, owed.ID)
		}
	})
	t.Run("fail/an abandon_owed that is not true or false is refused", func(t *testing.T) {
		if status, body := call(http.MethodGet, "jobs?abandon_owed=yes"); status != http.StatusBadRequest {
			t.Errorf("GET jobs?abandon_owed=yes: %d %s; want 400", status, body)
		}
	})
	const word = "cancelled — abandon pending on a runner of signer_issue"
	t.Run("ok/the CLI's job says on whom its abandon waits", func(t *testing.T) {
		out, err := runCLI("jobs", "show", strconv.FormatInt(owed.ID, 10), "--address", addr)
		if err != nil || !strings.Contains(out, word) {
			t.Errorf("jobs show: %v\n%s\nwant the status %q", err, out, word)
		}
	})
	t.Run("ok/the CLI's list says it of the owing job only", func(t *testing.T) {
		out, err := runCLI("jobs", "--address", addr)
		if err != nil {
			t.Fatalf("jobs: %v\n%s", err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if has := strings.Contains(line, word); has != strings.Contains(line, "order-1") {
				t.Errorf("the row %q says the abandon is pending: %v", line, has)
			}
		}
		if !strings.Contains(out, word) {
			t.Errorf("the list does not say %q:\n%s", word, out)
		}
	})
	t.Run("ok/the CLI's list filtered by --abandon_owed lists the owing job only", func(t *testing.T) {
		out, err := runCLI("jobs", "--abandon_owed", "true", "--address", addr)
		if err != nil || !strings.Contains(out, "order-1") || strings.Contains(out, "order-2") {
			t.Errorf("jobs --abandon_owed true: %v\n%s\nwant order-1's job only", err, out)
		}
	})
}

// `jobs cancel` of a running job asks it to stop after its current
// attempt: the job is still running when the CLI answers, and the CLI
// says its cancel was taken — as `jobs show` and the jobs table say
// until the attempt ends — rather than a bare "running" that reads as
// if the cancel did nothing.
func TestTheCLISaysARunningJobsCancelIsRequested(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Now()
	j, _, err := db.EnqueueJobLeased(ctx, store.NewJob{Kind: "relay_issue", Key: "o1", RunAt: now, MaxAttempts: 3}, "runner", now.Add(time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	addr := adminServer(t, db).Listener.Addr().String()
	id := strconv.FormatInt(j.ID, 10)
	for _, args := range [][]string{{"jobs", "cancel", id}, {"jobs", "show", id}, {"jobs", "--kind", "relay_issue"}} {
		out, err := runCLI(append(args, "--address", addr)...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(out, "running (cancel requested)") {
			t.Errorf("%s does not say the running job's cancel is requested:\n%s", strings.Join(args, " "), out)
		}
	}
}
