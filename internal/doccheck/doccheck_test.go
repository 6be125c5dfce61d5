package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckHoldsAPageToItsFile(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n\nfunc A() {\n\treturn\n}\n\nfunc B() {}\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	page := func(block string) string {
		p := filepath.Join(dir, "page.md")
		text := "# Page\n\n<!-- example: x.go -->\n```go\n" + block + "```\n"
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, ok := range []string{"func A() {\n\t// ...\n}\n", "func A() {\n\nfunc B() {}\n"} {
		if err := Check(page(ok), dir); err != nil {
			t.Errorf("block %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"func C() {}\n", "func B() {}\nfunc A() {\n"} {
		err := Check(page(bad), dir)
		if err == nil || !strings.Contains(err.Error(), "is not in the file") {
			t.Errorf("block %q: got %v, want a line not in the file", bad, err)
		}
	}
	if err := Check(filepath.Join(dir, "x.go"), dir); err == nil {
		t.Error("a page without a marked block passed")
	}
}
