package conformance

import (
	"context"
	"errors"
	"fmt"
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
	// Run checks the promise on s. It returns nil when the promise holds,
	// an error wrapping ErrSkipped when s gives it nothing to check, a
	// *BrokenPromise when a promise is broken (usually this one; a
	// wrapped ImplementedElsewhere is reported by any check), and another
	// error when a call failed for another reason.
	Run func(ctx context.Context, s S) error
}

// ErrSkipped is wrapped by a check's error when the setup gives it nothing
// to check (for example no way to provoke a RetryError).
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

// skipped returns the error of a check with nothing to check.
func skipped(promise, why string) error {
	return fmt.Errorf("%q %w: %s", promise, ErrSkipped, why)
}

// retry calls f until it returns something other than an *api.RetryError,
// waiting the RetryAfter asked (at most maxRetryWait) between calls, or
// until ctx ends. An ImplementedElsewhere wrapped rather than returned as is
// breaks the promise upstream relies on and is reported as such.
func retry[T any](ctx context.Context, op string, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != nil && err != cloudprovider.ImplementedElsewhere && errors.Is(err, cloudprovider.ImplementedElsewhere) {
			return v, broken(promiseElsewhere, "%s returned %q, which wraps cloudprovider.ImplementedElsewhere; upstream compares with ==, so it must be returned as is", op, err)
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
