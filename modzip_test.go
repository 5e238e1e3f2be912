package ccmkit_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// maxModuleZip is the most an importer of ccmkit should download: the module
// zip the Go module proxy serves holds every file tracked at the module root.
const maxModuleZip = 5 << 20

// TestModuleZipIsSmall builds the module zip from the work tree's files that git
// tracks, or would track (untracked and not ignored), as the proxy would serve
// them, and fails when it is over maxModuleZip. It prints the size.
func TestModuleZipIsSmall(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git checkout (git ls-files: %v): the module zip is what git tracks", err)
	}
	var files []zip.File
	for _, p := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, a link or a submodule: not in the zip
		}
		files = append(files, workFile(p))
	}
	var n countingWriter
	mod := module.Version{Path: "github.com/ccmkit/ccmkit", Version: "v0.0.0"}
	if err := zip.Create(&n, mod, files); err != nil {
		t.Fatalf("module zip of %d files: %v", len(files), err)
	}
	t.Logf("module zip: %d files, %d bytes (%.2f MiB; limit %d MiB)", len(files), n, float64(n)/(1<<20), maxModuleZip>>20)
	if n > maxModuleZip {
		t.Errorf("module zip is %d bytes, over %d: every importer downloads it (hack/check-files.sh names big files)", n, maxModuleZip)
	}
}

type workFile string

func (f workFile) Path() string                 { return filepath.ToSlash(string(f)) }
func (f workFile) Lstat() (os.FileInfo, error)  { return os.Lstat(string(f)) }
func (f workFile) Open() (io.ReadCloser, error) { return os.Open(string(f)) }

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
