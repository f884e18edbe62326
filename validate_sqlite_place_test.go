package caddyacmeproxy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
)

// Validating a config whose SQLite file caddy run could not create (its
// directory, or one it would make, cannot be made or written in) fails,
// naming the database key, the file and why, rather than passing a
// config that then fails to start; and it creates nothing.
func TestValidatingAConfigWhoseSQLiteFileCannotBeCreatedFailsNamingIt(t *testing.T) {
	for _, c := range []struct {
		name string
		// place returns the file's path in root.
		place func(t *testing.T, root string) string
		want  string
		// permissions: the case rests on permission bits, which root
		// bypasses.
		permissions bool
	}{
		{"under a regular file", func(t *testing.T, root string) string {
			if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(root, "file", "sub", "acme_proxy.db")
		}, "/file is not a directory", false},
		{"in a directory caddy may not write in", func(t *testing.T, root string) string {
			dir := filepath.Join(root, "ro")
			if err := os.Mkdir(dir, 0o500); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dir, "acme_proxy.db")
		}, "cannot write in the directory", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.permissions && proctest.RunUnprivileged(t) {
				return
			}
			dir := isolate(t)
			root := t.TempDir()
			place := c.place(t, root)
			before := treeOf(t, root)
			err := caddyValidate(t, validateConfig(t, dir, map[string]any{"database": place}, freePort(t), goodHandlers))
			if err == nil || !strings.Contains(err.Error(), "database: ") || !strings.Contains(err.Error(), place) ||
				!strings.Contains(err.Error(), c.want) {
				t.Fatalf("validate: %v; want an error naming the database key, %s and saying %q", err, place, c.want)
			}
			if after := treeOf(t, root); after != before {
				t.Errorf("validate created files:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// treeOf lists every name under root.
func treeOf(t *testing.T, root string) string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		names = append(names, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}
