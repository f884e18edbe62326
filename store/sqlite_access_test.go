package store

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
)

// Checking a SQLite store whose file does not exist yet fails, naming
// the file and why, when Open could not create it (caddy validate would
// pass a config that caddy run then fails to start), and creates
// nothing, as every Check; a file Open may create passes.
func TestCheckingASQLiteFileOpenCannotCreateFailsNamingWhy(t *testing.T) {
	for _, c := range []struct {
		name string
		// place returns the file's path in root.
		place func(t *testing.T, root string) string
		// want is what the error says ("" for none); permissions says
		// the case rests on permission bits, which root bypasses.
		want        string
		permissions bool
	}{
		{"ok/in a directory that exists", func(t *testing.T, root string) string {
			return filepath.Join(root, "acme_proxy.db")
		}, "", false},
		{"ok/in directories Open makes", func(t *testing.T, root string) string {
			return filepath.Join(root, "a", "b", "acme_proxy.db")
		}, "", false},
		{"fail/under a regular file", func(t *testing.T, root string) string {
			writeFile(t, filepath.Join(root, "file"))
			return filepath.Join(root, "file", "sub", "acme_proxy.db")
		}, "/file is not a directory", false},
		{"fail/named as a file's directory", func(t *testing.T, root string) string {
			writeFile(t, filepath.Join(root, "file"))
			return filepath.Join(root, "file", "acme_proxy.db")
		}, "/file is not a directory", false},
		{"fail/in a directory this process may not write in", func(t *testing.T, root string) string {
			dir := filepath.Join(root, "ro")
			if err := os.Mkdir(dir, 0o500); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dir, "sub", "acme_proxy.db")
		}, "cannot write in the directory", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.permissions && proctest.RunUnprivileged(t) {
				return
			}
			root := t.TempDir()
			place := c.place(t, root)
			before := treeOf(t, root)
			db, err := PrepareSQLite(place, SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Check(context.Background())
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), place)):
				t.Fatalf("Check: %v; want an error naming %s and saying %q", err, place, c.want)
			}
			if after := treeOf(t, root); after != before {
				t.Errorf("Check created files:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
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
