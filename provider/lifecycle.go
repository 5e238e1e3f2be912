package provider

import (
	"context"
	"errors"
	"fmt"
	"sync"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// Initializer is implemented by parts that need set-up with access to the
// cluster, such as a Kubernetes client from the client builder.
//
// Cloud.Initialize calls Initialize once per distinct part, synchronously,
// in the order of Config's fields, before any Runner is started and before
// the cloud-controller-manager starts its controllers. It should not block
// for long, and in particular should not depend on the cloud being
// reachable: a part that cannot reach its cloud at start-up should retry
// later rather than fail here. ctx carries the Cloud's logger
// (klog.FromContext) and is cancelled when the stop channel closes.
//
// A returned error is reported through Cloud.Err and logged; the part stays
// in the provider, but its Run is not started.
type Initializer interface {
	Initialize(ctx context.Context, clientBuilder cloudprovider.ControllerClientBuilder) error
}

// Runner is implemented by parts with background work, such as renewing
// leases.
//
// Cloud.Initialize starts Run once per distinct part, each in its own
// goroutine, after every part's Initialize has returned. Run should block
// until ctx is cancelled (when the stop channel given to Initialize closes)
// and must then return promptly: Cloud.Done waits for it. Run returning
// early just ends that part's background work; it is not restarted. ctx
// carries the Cloud's logger (klog.FromContext).
type Runner interface {
	Run(ctx context.Context)
}

// Initialize implements cloudprovider.Interface. It turns stop into a
// context, calls Initialize on every part that implements Initializer,
// then starts Run, in its own goroutine, on every part that implements
// Runner. A part filling several roles is initialized and run once (see
// Config for what counts as the same part).
//
// When stop closes, the context is cancelled, and Done is closed once every
// goroutine Initialize started has returned. A nil stop never closes.
//
// Only the first call has an effect; later calls, with any arguments, do
// nothing.
//
// Initialize has no error result in cloudprovider.Interface, and the
// cloud-controller-manager calls it where a library cannot hand an error
// back. So a failing part does not stop the others: its error is logged
// once, with the provider name and the part's roles, its Run is not
// started, and Err returns it. The part remains available through its
// accessor, as the provider cannot withdraw it after start-up.
func (c *Cloud) Initialize(clientBuilder cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.initOnce.Do(func() { c.initialize(clientBuilder, stop) })
}

func (c *Cloud) initialize(clientBuilder cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), c.logger))

	// The supervisor is started first so that stop also cancels a part's
	// Initialize. It waits for the runners only once all have been added.
	var runners sync.WaitGroup
	runnersAdded := make(chan struct{})
	go func() {
		<-stop
		cancel()
		<-runnersAdded
		runners.Wait()
		close(c.done)
	}()

	var errs []error
	var toRun []Runner
	for _, p := range c.parts {
		if in, ok := p.value.(Initializer); ok {
			if err := in.Initialize(ctx, clientBuilder); err != nil {
				err = fmt.Errorf("cloud provider %q: initialize %s: %w", c.name, p.describe(), err)
				c.logger.Error(err, "Cloud provider part failed to initialize, not starting its background work",
					"provider", c.name, "roles", p.roles, "type", fmt.Sprintf("%T", p.value))
				errs = append(errs, err)
				continue
			}
		}
		if r, ok := p.value.(Runner); ok {
			toRun = append(toRun, r)
		}
	}
	c.mu.Lock()
	c.initErr = errors.Join(errs...)
	c.mu.Unlock()

	// A plain go statement (not WaitGroup.Go) so that these goroutines are
	// "created by" initialize in stack dumps, which the leak test relies on.
	for _, r := range toRun {
		runners.Add(1)
		go func() {
			defer runners.Done()
			r.Run(ctx)
		}()
	}
	close(runnersAdded)
	c.logger.V(2).Info("Initialized cloud provider", "provider", c.name,
		"parts", len(c.parts), "runners", len(toRun), "failed", len(errs))
}

// Err returns the errors of the parts whose Initialize failed, joined with
// errors.Join, each wrapped with the provider name and the part's roles. It
// returns nil before Initialize is called and when every part initialized.
func (c *Cloud) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.initErr
}

// Done returns a channel that is closed once the stop channel given to
// Initialize has closed and every goroutine Initialize started has
// returned. It is never closed if Initialize is not called.
func (c *Cloud) Done() <-chan struct{} { return c.done }
