package gobuild

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBuildFails checks that a failed or stopped build names the command and
// says how long it ran, and that a build is stopped Margin before the
// deadline rather than at it.
func TestBuildFails(t *testing.T) {
	tests := []struct {
		name        string
		deadline    time.Time
		hasDeadline bool
		env, args   []string
		want        []string
	}{{
		name: "go fails",
		env:  []string{"CGO_ENABLED=0"},
		args: []string{"-o", os.DevNull, "./no-such-package"},
		want: []string{"CGO_ENABLED=0 go build -o " + os.DevNull + " ./no-such-package: failed after ", "no-such-package"},
	}, {
		name:        "deadline within the margin",
		deadline:    time.Now().Add(Margin - time.Second),
		hasDeadline: true,
		args:        []string{"-o", os.DevNull, "."},
		want:        []string{"go build -o " + os.DevNull + " .: stopped after 0s, 30s before the test binary's deadline (raise go test -timeout)"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := build(tt.deadline, tt.hasDeadline, tt.env, tt.args)
			if err == nil {
				t.Fatal("build succeeded, want an error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestFromSettings checks which recorded build settings become flags, which
// become environment, and which are left out.
func TestFromSettings(t *testing.T) {
	tests := []struct {
		name     string
		settings []debug.BuildSetting
		flags    []string
		env      []string
	}{{
		name: "go test -race",
		settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"}, {Key: "-compiler", Value: "gc"}, {Key: "-race", Value: "true"},
			{Key: "DefaultGODEBUG", Value: "tlssha1=1"}, {Key: "CGO_ENABLED", Value: "1"}, {Key: "CGO_CFLAGS", Value: ""},
			{Key: "GOARCH", Value: "amd64"}, {Key: "GOOS", Value: "linux"}, {Key: "GOAMD64", Value: "v1"},
		},
		flags: []string{"-buildmode=exe", "-compiler=gc", "-race=true"},
		env:   []string{"CGO_ENABLED=1", "CGO_CFLAGS=", "GOARCH=amd64", "GOOS=linux", "GOAMD64=v1"},
	}, {
		name: "static, tagged, trimmed, with gcflags; ldflags and vcs left out",
		settings: []debug.BuildSetting{
			{Key: "-gcflags", Value: "all=-N -l"}, {Key: "-ldflags", Value: "-s -w"}, {Key: "-tags", Value: "netgo,osusergo"},
			{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"}, {Key: "GOEXPERIMENT", Value: "greenteagc"},
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.modified", Value: "false"},
		},
		flags: []string{"-gcflags=all=-N -l", "-tags=netgo,osusergo", "-trimpath=true"},
		env:   []string{"CGO_ENABLED=0", "GOEXPERIMENT=greenteagc"},
	}, {
		name: "nothing recorded",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, env := fromSettings(tt.settings)
			if diff := cmp.Diff(tt.flags, flags); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.env, env); diff != "" {
				t.Errorf("environment (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuildLikeTheTestBinary builds a command and checks that it records
// the running test binary's build settings (under go test -race: -race,
// CGO_ENABLED=1), which is what lets it reuse the test build's cache.
func TestBuildLikeTheTestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hello")
	if err := Build(t, "-o", bin, "./testdata/hello"); err != nil {
		t.Fatal(err)
	}
	got, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	self, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	// The settings Flags carries over, as the test binary and the command
	// record them.
	carried := func(settings []debug.BuildSetting) map[string]string {
		m := map[string]string{}
		for _, s := range settings {
			if (strings.HasPrefix(s.Key, "-") && s.Key != "-ldflags") || isEnvName(s.Key) {
				m[s.Key] = s.Value
			}
		}
		return m
	}
	want := carried(self.Settings)
	if len(want) == 0 {
		t.Fatal("the test binary records no build settings")
	}
	if diff := cmp.Diff(want, carried(got.Settings)); diff != "" {
		t.Errorf("build settings of the test binary (-) and of the command (+):\n%s", diff)
	}
}
