package registry_test

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/registry"
)

// deadlockTimeout bounds waits that only time out if the registry
// deadlocks; it is not a performance expectation.
const deadlockTimeout = 30 * time.Second

// TestConcurrentUse runs many goroutines that register, look up, build and
// unregister at once; run it with -race. Every goroutine also races to
// register one shared name, and exactly one must win.
func TestConcurrentUse(t *testing.T) {
	const workers = 64
	var builds atomic.Int64
	factory := func(name string) cloudprovider.Factory {
		return func(io.Reader) (cloudprovider.Interface, error) {
			builds.Add(1)
			return &stubCloud{name: name}, nil
		}
	}
	r := registry.New()
	r.MustRegister("base", factory("base"))

	var wins atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			errs <- func() error {
				name := fmt.Sprintf("worker-%d", i)
				if err := r.Register(name, factory(name)); err != nil {
					return err
				}
				switch err := r.Register("shared", factory("shared")); {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, registry.ErrDuplicate):
					return fmt.Errorf("Register(shared) = %w, want nil or ErrDuplicate", err)
				}
				for _, n := range []string{name, "base", "shared"} {
					if !r.IsRegistered(n) {
						return fmt.Errorf("IsRegistered(%q) = false", n)
					}
					c, err := r.Build(n, nil)
					if err != nil {
						return err
					}
					if c.ProviderName() != n {
						return fmt.Errorf("Build(%q) built %q", n, c.ProviderName())
					}
				}
				if names := r.Names(); !slices.IsSorted(names) || !slices.Contains(names, name) {
					return fmt.Errorf("Names() = %q: not sorted or missing %q", names, name)
				}
				if i%2 == 0 && !r.Unregister(name) {
					return fmt.Errorf("Unregister(%q) = false", name)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := wins.Load(); got != 1 {
		t.Errorf("%d goroutines registered %q, want exactly 1", got, "shared")
	}
	if got, want := builds.Load(), int64(3*workers); got != want {
		t.Errorf("factories ran %d times, want %d", got, want)
	}
	// base, shared, and the odd workers that kept their names.
	if got, want := len(r.Names()), 2+workers/2; got != want {
		t.Errorf("len(Names()) = %d, want %d", got, want)
	}
}

// TestFactoryRunsOutsideLock holds a factory inside Build and checks that
// every other operation still completes from other goroutines.
func TestFactoryRunsOutsideLock(t *testing.T) {
	r := newRegistry(t, "fast")
	entered := make(chan struct{})
	release := make(chan struct{})
	r.MustRegister("slow", func(io.Reader) (cloudprovider.Interface, error) {
		close(entered)
		<-release
		return &stubCloud{name: "slow"}, nil
	})

	slowDone := make(chan error, 1)
	go func() {
		_, err := r.Build("slow", nil)
		slowDone <- err
	}()
	select {
	case <-entered:
	case <-time.After(deadlockTimeout):
		t.Fatal("the slow factory was never called")
	}

	// While the slow factory is blocked, every operation must complete.
	others := make(chan error, 1)
	go func() {
		others <- func() error {
			if err := r.Register("other", stubFactory("other")); err != nil {
				return err
			}
			if !r.IsRegistered("other") || !r.IsRegistered("slow") {
				return errors.New("IsRegistered = false")
			}
			if got, want := r.Names(), []string{"fast", "other", "slow"}; !slices.Equal(got, want) {
				return fmt.Errorf("Names() = %q, want %q", got, want)
			}
			if _, err := r.Build("fast", nil); err != nil {
				return err
			}
			if !r.Unregister("other") {
				return errors.New(`Unregister("other") = false`)
			}
			// Even the name being built can be unregistered; the running
			// Build is not affected.
			if !r.Unregister("slow") {
				return errors.New(`Unregister("slow") = false`)
			}
			return nil
		}()
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(deadlockTimeout):
		close(release)
		t.Fatal("registry operations blocked while a factory was running")
	}

	select {
	case err := <-slowDone:
		t.Fatalf("slow Build returned (%v) before its factory was released", err)
	default:
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Errorf("slow Build = %v, want success", err)
	}
}

// TestFactoryMayUseRegistry checks that a factory can call back into the
// registry that is building it, which deadlocks if the lock is held.
func TestFactoryMayUseRegistry(t *testing.T) {
	r := newRegistry(t, "inner")
	r.MustRegister("outer", func(io.Reader) (cloudprovider.Interface, error) {
		if _, err := r.Build("inner", nil); err != nil {
			return nil, err
		}
		return &stubCloud{name: "outer"}, nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := r.Build("outer", nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(deadlockTimeout):
		t.Fatal("a factory calling Build on its own registry deadlocked")
	}
}
