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
