package gobuild

import (
	"os"
	"strings"
	"testing"
	"time"
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
