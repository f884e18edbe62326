package caddyacmeproxy

import (
	"io"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// `caddy acme-proxy --help` shows one usage line per subcommand; an
// operator reads the flags there. Every flag a subcommand takes is on
// its line, so that none is found only by reading the code.
func TestTheHelpOfEverySubcommandListsEachOfItsFlags(t *testing.T) {
	reg, ok := caddycmd.Commands()["acme-proxy"]
	if !ok {
		t.Fatal("the acme-proxy command is not registered")
	}
	var usage []string
	for line := range strings.SplitSeq(reg.Long, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "caddy acme-proxy "); ok {
			usage = append(usage, rest)
		}
	}
	root := &cobra.Command{Use: "acme-proxy"}
	configureCLI(root, io.Discard)
	var walk func(cmd *cobra.Command, path string)
	walk = func(cmd *cobra.Command, path string) {
		for _, sub := range cmd.Commands() {
			p := strings.TrimSpace(path + " " + sub.Name())
			var lines []string
			for _, u := range usage {
				if u == p || strings.HasPrefix(u, p+" ") {
					lines = append(lines, u)
				}
			}
			sub.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" {
					return
				}
				t.Run(p+" --"+f.Name, func(t *testing.T) {
					for _, l := range lines {
						if strings.Contains(l, "--"+f.Name+" ") || strings.Contains(l, "--"+f.Name+"]") || strings.HasSuffix(l, "--"+f.Name) {
							return
						}
					}
					t.Errorf("the help's usage of %q does not list --%s:\n%s", p, f.Name, strings.Join(lines, "\n"))
				})
			})
			walk(sub, p)
		}
	}
	walk(root, "")
}

// A list's flags say what each takes: a time flag an RFC 3339 time or an
// age, a cursor the previous page's id, limit its range, status and
// outcome their values — a cursor named before is no time, though
// audit prune's --before is, and an operator reads which from the help.
func TestTheHelpOfAListsFlagsSaysWhatEachTakes(t *testing.T) {
	tests := []struct {
		command, flag string
		want          []string
	}{
		{"orders", "since", []string{"RFC 3339", "age"}},
		{"audit", "since", []string{"RFC 3339", "age"}},
		{"audit", "until", []string{"RFC 3339", "age"}},
		{"orders", "after", []string{"page", "more"}},
		{"accounts", "after", []string{"page", "more"}},
		{"eab list", "after", []string{"page", "more"}},
		{"jobs", "before", []string{"page", "more"}},
		{"audit", "before", []string{"page", "more"}},
		{"orders", "limit", []string{"1 to 1000", "100"}},
		{"audit", "limit", []string{"1 to 1000", "100"}},
		{"orders", "status", []string{"pending", "ready", "processing", "valid", "invalid"}},
		{"accounts", "status", []string{"valid", "deactivated", "revoked"}},
		{"jobs", "status", []string{"ready", "running", "done", "failed", "cancelled"}},
		{"jobs", "abandon_owed", []string{"true"}},
		{"audit", "outcome", []string{"success", "failure", "refused"}},
		{"orders", "serial", []string{"hex"}},
		{"eab list", "profile", []string{"required"}},
	}
	root := &cobra.Command{Use: "acme-proxy"}
	configureCLI(root, io.Discard)
	for _, tt := range tests {
		t.Run(tt.command+" --"+tt.flag, func(t *testing.T) {
			cmd, _, err := root.Find(strings.Fields(tt.command))
			if err != nil {
				t.Fatal(err)
			}
			f := cmd.Flags().Lookup(tt.flag)
			if f == nil {
				t.Fatalf("%s has no --%s", tt.command, tt.flag)
			}
			for _, w := range tt.want {
				if !strings.Contains(f.Usage, w) {
					t.Errorf("the help of %s --%s, %q, does not say %q", tt.command, tt.flag, f.Usage, w)
				}
			}
		})
	}
}
