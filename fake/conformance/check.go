package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
)

// Check is one promise of a contract and how to check it on a setup S.
type Check[S any] struct {
	// Promise is what the implementation promises; it names the subtest
	// and starts every error the check returns.
	Promise string
	// Run checks the promise on s. It returns nil when the promise holds;
	// a *BrokenPromise when a promise is broken (usually this one; a
	// wrapped ImplementedElsewhere is reported by any check); when s gives
	// it nothing to check, an error wrapping ErrSkipped if s's Skip names
	// the promise and otherwise an error naming the field that would let
	// it check; and another error when a call failed for another reason
	// or s is a setup mistake.
	Run func(ctx context.Context, s S) error
}

// ErrSkipped is wrapped by a check's error when the setup gives it nothing
// to check (for example no way to provoke a RetryError) and names its
// promise in its Skip.
var ErrSkipped = errors.New("skipped")

// checkTimeout bounds one check, retries included.
const checkTimeout = 60 * time.Second

// maxRetryWait caps the wait before retrying a call that returned an
// *api.RetryError, so a long RetryAfter does not stall the suite.
const maxRetryWait = time.Second

// run runs checks as subtests of t, each on a fresh setup from newSetup.
func run[S any](t *testing.T, checks []Check[S], newSetup func(testing.TB) S) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.Promise, func(t *testing.T) {
			s := newSetup(t)
			ctx, cancel := context.WithTimeout(t.Context(), checkTimeout)
			defer cancel()
			err := c.Run(ctx, s)
			switch {
			case errors.Is(err, ErrSkipped):
				t.Skip(err)
			case err != nil:
				t.Error(err)
			}
		})
	}
}

// BrokenPromise is the error of a check that found its promise broken.
type BrokenPromise struct {
	Promise string // the promise broken, a Check's Promise
	Detail  string // what was seen
}

func (e *BrokenPromise) Error() string {
	return "broken promise: " + e.Promise + ": " + e.Detail
}

// broken returns the error of a broken promise.
func broken(promise, format string, args ...any) error {
	return &BrokenPromise{Promise: promise, Detail: fmt.Sprintf(format, args...)}
}

// optional is a promise a setup may leave unchecked: its exported
// constant's name, and how to let the suite check it.
type optional struct {
	promise, constant, enable string
}

// unchecked returns the error of a check whose setup (named kind, opting
// out of the promises in skip) gives it nothing to check, because of why:
// an error wrapping ErrSkipped when skip names the promise, otherwise an
// error saying how to check it or opt out of it. Plain go test prints
// failures only, so a promise goes unchecked only where the author says.
func unchecked(kind string, skip []string, o optional, why string) error {
	if slices.Contains(skip, o.promise) {
		return fmt.Errorf("%q %w: %s", o.promise, ErrSkipped, why)
	}
	return fmt.Errorf("%q is unchecked: %s; %s, or opt out of it with %s.Skip: []string{conformance.%s}", o.promise, why, o.enable, kind, o.constant)
}

// validateSkip reports a Skip entry that names no promise of opts.
func validateSkip(kind string, skip []string, opts []optional) error {
	for _, name := range skip {
		if !slices.ContainsFunc(opts, func(o optional) bool { return o.promise == name }) {
			var consts []string
			for _, o := range opts {
				consts = append(consts, "conformance."+o.constant)
			}
			return fmt.Errorf("%s.Skip: %q is not a promise this suite can leave unchecked; those are %s", kind, name, strings.Join(consts, ", "))
		}
	}
	return nil
}

// retry calls f until it returns something other than an *api.RetryError,
// waiting the RetryAfter asked (at most maxRetryWait) between calls, or
// until ctx ends. An ImplementedElsewhere wrapped rather than returned as is
// breaks the promise upstream relies on and is reported as such.
func retry[T any](ctx context.Context, op string, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != nil && err != cloudprovider.ImplementedElsewhere && errors.Is(err, cloudprovider.ImplementedElsewhere) {
			return v, broken(PromiseElsewhere, "%s returned %q, which wraps cloudprovider.ImplementedElsewhere; upstream compares with ==, so it must be returned as is", op, err)
		}
		var re *api.RetryError
		if !errors.As(err, &re) {
			if err != nil {
				err = fmt.Errorf("%s: %w", op, err)
			}
			return v, err
		}
		wait := min(max(re.RetryAfter(), 10*time.Millisecond), maxRetryWait)
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%s: still asking to retry when the check's time ran out: %w", op, err)
		case <-time.After(wait):
		}
	}
}
