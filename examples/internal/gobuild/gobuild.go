package gobuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

// Build runs `go build <args...>` in the current directory (the test's
// package directory under go test), with env added to the test's own
// environment, for example "CGO_ENABLED=0".
//
// The build is stopped Margin before t.Deadline(); without a deadline
// (go test -timeout 0) it is never stopped. A build that fails or is stopped
// gives an error naming the command, its environment and how long it ran,
// followed by go's output.
// Build does not call t.Fatal, so a caller may build once (sync.Once) and
// report the same error to every test that needs the result.
func Build(t *testing.T, env []string, args ...string) error {
	t.Helper()
	deadline, ok := t.Deadline()
	took, err := build(deadline, ok, env, args)
	if err == nil {
		t.Logf("go build %s: built in %s", strings.Join(args, " "), took)
	}
	return err
}

// build is Build with the deadline given, returning how long go ran.
func build(deadline time.Time, hasDeadline bool, env, args []string) (time.Duration, error) {
	what := strings.TrimSpace(strings.Join(env, " ") + " go build " + strings.Join(args, " "))
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
