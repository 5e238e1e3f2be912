package gobuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// Margin is how long before the test binary's deadline a build still
// running is stopped: time for go to stop (WaitDelay) and for the test to
// fail with a message, so the binary does not panic on -timeout instead.
const Margin = 30 * time.Second

// waitDelay is how long go may take to exit after it is interrupted (it
// stops starting compile actions and waits for the running ones) before it
// is killed.
const waitDelay = 10 * time.Second

// Build runs `go build <flags...> <args...>` in the current directory (the
// test's package directory under go test), where flags and the added
// environment are the running test binary's (see Flags). args are the
// caller's, for example "-ldflags", "-X main.v=1", "-o", path, ".".
//
// The build is stopped Margin before t.Deadline(); without a deadline
// (go test -timeout 0) it is never stopped. A build that fails or is stopped
// gives an error naming the command, its environment and how long it ran,
// followed by go's output.
// Build does not call t.Fatal, so a caller may build once (sync.Once) and
// report the same error to every test that needs the result.
func Build(t *testing.T, args ...string) error {
	t.Helper()
	flags, env := Flags()
	deadline, ok := t.Deadline()
	took, err := build(deadline, ok, env, append(flags, args...))
	if err == nil {
		t.Logf("%s: built in %s", command(env, append(flags, args...)), took)
	}
	return err
}

// Context returns a context for running what was built, bounded like a
// build: it ends Margin before t.Deadline() (with no deadline, when the
// test ends), so that a command that hangs fails the test with a message
// instead of the test binary panicking on -timeout. It has no wall clock
// of its own: on a busy machine a command takes as long as it takes.
func Context(t *testing.T) context.Context {
	t.Helper()
	deadline, ok := t.Deadline()
	if !ok {
		return t.Context()
	}
	ctx, cancel := context.WithDeadline(t.Context(), deadline.Add(-Margin))
	t.Cleanup(cancel)
	return ctx
}

// Flags returns the go build flags and the environment (NAME=value) the
// running binary was built with, from its build information: every flag
// setting go records (-race, -msan, -asan, -tags, -trimpath, -gcflags,
// -asmflags, -buildmode, -compiler, -pgo) except -ldflags, and every
// environment setting (CGO_ENABLED and the CGO_ flags, GOOS, GOARCH and its
// level such as GOAMD64, GOEXPERIMENT). -ldflags is left to the caller:
// link flags do not change what is compiled. Without build information
// (a binary not built by go) both are empty.
func Flags() (flags, env []string) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, nil
	}
	return fromSettings(info.Settings)
}

// fromSettings is Flags on the given build settings.
func fromSettings(settings []debug.BuildSetting) (flags, env []string) {
	for _, s := range settings {
		switch {
		case s.Key == "-ldflags":
		case strings.HasPrefix(s.Key, "-"):
			flags = append(flags, s.Key+"="+s.Value)
		case isEnvName(s.Key):
			env = append(env, s.Key+"="+s.Value)
		}
		// Others (DefaultGODEBUG, vcs.*) describe the module, not the build.
	}
	return flags, env
}

// isEnvName reports whether key is spelled like an environment variable
// (upper case, digits, underscores), as go spells the environment settings
// it records and none of the others.
func isEnvName(key string) bool {
	if key == "" {
		return false
	}
	for _, r := range key {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// command is how an error or a log line names the build.
func command(env, args []string) string {
	return strings.TrimSpace(strings.Join(env, " ") + " go build " + strings.Join(args, " "))
}

// build runs go build with env added to this process's environment, with
// the deadline given, returning how long go ran.
func build(deadline time.Time, hasDeadline bool, env, args []string) (time.Duration, error) {
	what := command(env, args)
	goTool, err := exec.LookPath("go")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	ctx := context.Background()
	if hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-Margin))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, goTool, append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = waitDelay
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(100 * time.Millisecond)
	switch {
	case ctx.Err() != nil:
		return took, fmt.Errorf("%s: stopped after %s, %s before the test binary's deadline (raise go test -timeout): %w\n%s", what, took, Margin, err, out)
	case err != nil:
		return took, fmt.Errorf("%s: failed after %s: %w\n%s", what, took, err, out)
	}
	return took, nil
}
