package igdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Require checks what Start checks — root, and the programs ip, nft,
// miniupnpd, upnpc, mount and sh — without starting anything. When something
// is missing it calls t.Skip with the reason, or t.Fatal when the environment
// variable CI is "true" (in CI the lab tests are mandatory).
func Require(t testing.TB) {
	t.Helper()
	checkPrereqs(t)
}

// checkPrereqs is Require returning the programs' paths.
func checkPrereqs(t testing.TB) tools {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	var tl tools
	for _, p := range []struct {
		name string
		dst  *string
	}{
		{"ip", &tl.ip},
		{"nft", &tl.nft},
		{"miniupnpd", &tl.miniupnpd},
		{"upnpc", &tl.upnpc},
		{"mount", &tl.mount},
		{"sh", &tl.sh},
	} {
		path, err := lookPath(p.name)
		if err != nil {
			missing = append(missing, p.name)
			continue
		}
		*p.dst = path
	}
	if len(missing) > 0 {
		skipOrFatal(t, "root, ip, nft, miniupnpd, upnpc, mount and sh", "missing "+strings.Join(missing, ", "))
	}
	return tl
}

// lookPath finds name in PATH or, since tests often run with a PATH without
// the sbin directories, in /usr/sbin and /sbin.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// skipOrFatal skips the test because a need is not met (why says what is
// missing), or fails it when CI is "true".
func skipOrFatal(t testing.TB, need, why string) {
	t.Helper()
	msg := "igdtest: needs " + need + ": " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
		return
	}
	t.Skip(msg)
}
