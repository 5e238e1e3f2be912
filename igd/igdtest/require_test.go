package igdtest

import (
	"fmt"
	"strings"
	"testing"
)

// recordingTB records Skip and Fatal instead of ending the test.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper()               {}
func (r *recordingTB) Skip(args ...any)      { r.skipped = fmt.Sprint(args...) }
func (r *recordingTB) Fatal(args ...any)     { r.fatal = fmt.Sprint(args...) }
func (r *recordingTB) Skipf(string, ...any)  { panic("unexpected Skipf") }
func (r *recordingTB) Fatalf(string, ...any) { panic("unexpected Fatalf") }

func TestSkipOrFatal(t *testing.T) {
	const want = "igdtest: needs root, ip, nft, miniupnpd and upnpc: missing root, upnpc"
	for _, tc := range []struct {
		ci        string
		wantSkip  string
		wantFatal string
	}{
		{ci: "", wantSkip: want},
		{ci: "false", wantSkip: want},
		{ci: "1", wantSkip: want}, // only the exact value "true" makes the lab mandatory
		{ci: "true", wantFatal: want},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			rec := &recordingTB{TB: t}
			skipOrFatal(rec, "root, ip, nft, miniupnpd and upnpc", "missing root, upnpc")
			if rec.skipped != tc.wantSkip {
				t.Fatalf("skipped with %q, want %q", rec.skipped, tc.wantSkip)
			}
			if rec.fatal != tc.wantFatal {
				t.Fatalf("failed with %q, want %q", rec.fatal, tc.wantFatal)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		want     []string
		dontWant []string
	}{
		{"default", Options{}, []string{"secure_mode=no\n", "ext_ifname=wan0\n", "listening_ip=lan0\n", "port=5000\n"}, []string{"force_igd_desc_v1", "lease_file"}},
		{"secure", Options{SecureMode: true}, []string{"secure_mode=yes\n"}, []string{"secure_mode=no"}},
		{"igdv1", Options{ForceIGDv1: true}, []string{"force_igd_desc_v1=yes\n", "secure_mode=no\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config(tc.opts)
			for _, w := range tc.want {
				if !strings.Contains(c, w) {
					t.Fatalf("config lacks %q:\n%s", w, c)
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(c, w) {
					t.Fatalf("config has %q, want it not to:\n%s", w, c)
				}
			}
		})
	}
}
