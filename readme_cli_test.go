package caddyacmeproxy

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// An operator copies the README's `caddy acme-proxy …` lines: every
// subcommand they name is one the CLI has, and every flag is one that
// subcommand takes; and every subcommand of the CLI is in the README.
func TestEveryCLICommandLineOfTheREADMENamesSubcommandsAndFlagsTheCLIHas(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root := &cobra.Command{Use: "acme-proxy"}
	configureCLI(root, io.Discard)
	lines := readmeCLILines(string(readme))
	if len(lines) < 15 {
		t.Fatalf("found %d `caddy acme-proxy` lines in the README; it shows more", len(lines))
	}
	named := map[string]bool{}
	for _, line := range lines {
		for _, problem := range checkCLILine(root, line, named) {
			t.Errorf("the README's %q: %s", line, problem)
		}
	}
	for _, sub := range root.Commands() {
		if !named[sub.Name()] {
			t.Errorf("the subcommand %q is in no `caddy acme-proxy` line of the README", sub.Name())
		}
	}
}

// readmeCLILines returns what follows "caddy acme-proxy" in the README:
// each line of a code block naming it (a line ending in \ joined to the
// next), and each inline code span naming it (its line breaks spaces).
func readmeCLILines(readme string) []string {
	var out []string
	call := regexp.MustCompile("(?:^|[\\s`/])caddy acme-proxy(.*)")
	var prose []string
	inBlock, cont := false, ""
	for line := range strings.SplitSeq(readme, "\n") {
		if strings.HasPrefix(line, "```") || strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			prose = append(prose, "")
			continue
		}
		if !inBlock {
			prose = append(prose, line)
			continue
		}
		line = cont + line
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cont = ""
		if m := call.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	for _, span := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(strings.Join(prose, "\n"), -1) {
		if m := call.FindStringSubmatch(strings.Join(strings.Fields(span[1]), " ")); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// checkCLILine walks a README line's words down the command tree: words
// naming subcommands (a|b|c naming several), then arguments and --flags,
// each flag one of the command's own or its parents' persistent ones. It
// marks the top-level subcommands it meets in named.
func checkCLILine(root *cobra.Command, line string, named map[string]bool) []string {
	var problems []string
	cur, descending := root, true
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, "#") {
			break
		}
		w = strings.Trim(w, "[]|,;.")
		switch {
		case w == "" || w == "--" || w == "…" || w == "...":
		case strings.HasPrefix(w, "--"):
			name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
			if name == "help" {
				continue
			}
			found := false
			for c := cur; c != nil && !found; c = c.Parent() {
				found = c.Flags().Lookup(name) != nil || c.PersistentFlags().Lookup(name) != nil
			}
			if !found {
				problems = append(problems, "`"+cur.CommandPath()+"` takes no flag --"+name)
			}
			descending = false
		case descending && strings.Contains(w, "|") && !strings.ContainsAny(w, "<>"):
			for _, alt := range strings.Split(w, "|") {
				sub := subcommand(cur, alt)
				if sub == nil {
					problems = append(problems, "`"+cur.CommandPath()+"` has no subcommand "+alt)
				} else if cur == root {
					named[alt] = true
				}
			}
			descending = false
		case descending && subcommand(cur, w) != nil:
			cur = subcommand(cur, w)
			if cur.Parent() == root {
				named[w] = true
			}
		case descending && len(cur.Commands()) > 0 && regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w):
			problems = append(problems, "`"+cur.CommandPath()+"` has no subcommand "+w)
			descending = false
		default:
			descending = false // an argument: what follows are arguments and flags
		}
	}
	return problems
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, sub := range cmd.Commands() {
		if sub.Name() == name {
			return sub
		}
	}
	return nil
}
