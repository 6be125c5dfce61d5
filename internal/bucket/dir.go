package bucket

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"
)

// dirBucket keeps objects as files under root.
type dirBucket struct{ root string }

func (d *dirBucket) String() string { return "file://" + filepath.ToSlash(d.root) }

// Put writes a temporary file, syncs it and renames it into place, so a
// reader sees the whole object or none.
func (d *dirBucket) Put(_ context.Context, key string, body []byte) error {
	path := filepath.Join(d.root, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".part-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(body); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename, and the folders made for it, last only once their
	// folders are synced: the removal that follows must not outlive them.
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if err := syncDir(dir); err != nil {
			return err
		}
		if dir == d.root || dir == filepath.Dir(dir) || !strings.HasPrefix(dir, d.root) {
			return nil
		}
	}
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return f.Sync()
}

// Delete removes an object; one already gone is no error.
func (d *dirBucket) Delete(_ context.Context, key string) error {
	path := filepath.Join(d.root, filepath.FromSlash(key))
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		_ = os.Remove(filepath.Dir(path)) // the object's own folder, when empty (a blob's)
	}
	return err
}

func (d *dirBucket) Get(_ context.Context, key string) ([]byte, error) {
	return os.ReadFile(filepath.Join(d.root, filepath.FromSlash(key)))
}

func (d *dirBucket) Open(_ context.Context, key string) (io.ReadCloser, error) {
	return os.Open(filepath.Join(d.root, filepath.FromSlash(key)))
}

// List walks the directory of prefix; a prefix not yet written holds no
// keys.
func (d *dirBucket) List(_ context.Context, prefix string) ([]string, error) {
	start := filepath.Join(d.root, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
	var keys []string
	err := filepath.WalkDir(start, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".part-") {
			return nil
		}
		rel, err := filepath.Rel(d.root, path)
		if err != nil {
			return err
		}
		keys = append(keys, filepath.ToSlash(rel))
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	sort.Strings(keys)
	return keys, err
}
