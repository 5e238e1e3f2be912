package provider_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/provider"
)

// deadlockTimeout bounds waits that only expire if the code under test
// hangs; it is not a performance expectation.
const deadlockTimeout = 30 * time.Second

// lifecyclePart is a part that implements Initializer, Runner and
// cloudprovider.InformerUser and records how it was called. Its Run blocks
// until its context is cancelled.
type lifecyclePart struct {
	allParts
	initErr error
	// initBlocks makes Initialize wait for its context to be cancelled.
	initBlocks bool
	// initEntered, if not nil, is closed when Initialize is entered.
	initEntered chan struct{}
	// order, if not nil, receives the part's id when Initialize is called.
	order *[]string

	mu           sync.Mutex
	inits        int
	initCtx      context.Context
	builder      cloudprovider.ControllerClientBuilder
	runs         int
	runsReturned int
	informers    []informers.SharedInformerFactory
}

var (
	_ provider.Initializer       = (*lifecyclePart)(nil)
	_ provider.Runner            = (*lifecyclePart)(nil)
	_ cloudprovider.InformerUser = (*lifecyclePart)(nil)
)

func (p *lifecyclePart) Initialize(ctx context.Context, cb cloudprovider.ControllerClientBuilder) error {
	p.mu.Lock()
	p.inits++
	p.initCtx = ctx
	p.builder = cb
	if p.order != nil {
		*p.order = append(*p.order, p.id)
	}
	p.mu.Unlock()
	klog.FromContext(ctx).Info("Part initializing", "part", p.id)
	if p.initEntered != nil {
		close(p.initEntered)
	}
	if p.initBlocks {
		<-ctx.Done()
	}
	return p.initErr
}

func (p *lifecyclePart) Run(ctx context.Context) {
	p.mu.Lock()
	p.runs++
	p.mu.Unlock()
	klog.FromContext(ctx).Info("Part running", "part", p.id)
	<-ctx.Done()
	p.mu.Lock()
	p.runsReturned++
	p.mu.Unlock()
}

func (p *lifecyclePart) SetInformers(f informers.SharedInformerFactory) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.informers = append(p.informers, f)
}

// counts returns how often Initialize and Run were called and how many Run
// calls have returned.
func (p *lifecyclePart) counts() (inits, runs, runsReturned int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inits, p.runs, p.runsReturned
}

// fakeBuilder is a ControllerClientBuilder the tests compare by identity;
// its methods are never called.
type fakeBuilder struct {
	cloudprovider.ControllerClientBuilder
	id string
}

// lifecycleGoroutines counts the live goroutines that Cloud.Initialize
// started. Every such goroutine's stack dump names its creator.
func lifecycleGoroutines() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/ccmkit/ccmkit/provider.(*Cloud).initialize") {
			count++
		}
	}
	return count
}

// waitNoLifecycleGoroutines fails the test unless every goroutine started
// by Cloud.Initialize exits. A goroutine that has closed Done may still be
// returning, so this polls until the count reaches zero; only a leak makes
// it wait for the deadline.
func waitNoLifecycleGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(deadlockTimeout)
	for lifecycleGoroutines() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines started by Initialize are still running after Done", lifecycleGoroutines())
		}
		time.Sleep(time.Millisecond)
	}
}

// waitClosed fails the test if ch is not closed within deadlockTimeout.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(deadlockTimeout):
		t.Fatalf("%s was not closed", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func newCloud(t *testing.T, cfg provider.Config) *provider.Cloud {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	}
	c, err := provider.New("test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestInitialize checks that Initialize hands out the client builder and
// starts background work once per distinct part, and that closing stop ends
// every goroutine it started. The lifecycle tests do not run in parallel,
// as they count goroutines process-wide.
func TestInitialize(t *testing.T) {
	var order []string
	shared := &lifecyclePart{allParts: allParts{id: "shared"}, order: &order}
	routes := &lifecyclePart{allParts: allParts{id: "routes"}, order: &order}
	plain := &allParts{id: "plain"} // neither Initializer nor Runner
	var typedNil *lifecyclePart     // calling it would panic
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	c := newCloud(t, provider.Config{
		LoadBalancer: shared,
		InstancesV2:  shared,
		Zones:        plain,
		Clusters:     typedNil,
		Routes:       routes,
		Logger:       logger,
	})
	if isClosed(c.Done()) {
		t.Fatal("Done is closed before Initialize")
	}

	builder := &fakeBuilder{id: "builder"}
	stop := make(chan struct{})
	c.Initialize(builder, stop)

	// One supervisor plus one Run goroutine per distinct runner.
	if got := lifecycleGoroutines(); got != 3 {
		t.Errorf("Initialize started %d goroutines, want 3", got)
	}
	if want := []string{"shared", "routes"}; !slices.Equal(order, want) {
		t.Errorf("Initialize order = %q, want %q", order, want)
	}
	for _, p := range []*lifecyclePart{shared, routes} {
		if inits, _, _ := p.counts(); inits != 1 {
			t.Errorf("part %s initialized %d times, want 1", p.id, inits)
		}
		if p.builder != builder {
			t.Errorf("part %s got client builder %v, want %v", p.id, p.builder, builder)
		}
	}
	if isClosed(c.Done()) {
		t.Fatal("Done is closed before stop")
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}

	close(stop)
	waitClosed(t, c.Done(), "Done after stop")
	for _, p := range []*lifecyclePart{shared, routes} {
		if _, runs, returned := p.counts(); runs != 1 || returned != 1 {
			t.Errorf("part %s: Run called %d times, returned %d times before Done; want 1 and 1", p.id, runs, returned)
		}
		if p.initCtx.Err() == nil {
			t.Errorf("part %s: Initialize's context not cancelled after stop", p.id)
		}
	}
	// Initialize's and Run's contexts carry Config.Logger: what the parts
	// logged through klog.FromContext is in its buffer.
	var logged []string
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if len(e.ParameterKVList) == 2 {
			logged = append(logged, fmt.Sprintf("%s %v", e.Message, e.ParameterKVList[1]))
		}
	}
	for _, want := range []string{"Part initializing shared", "Part running shared", "Part initializing routes", "Part running routes"} {
		if !slices.Contains(logged, want) {
			t.Errorf("Config.Logger got %q, want it to include %q", logged, want)
		}
	}
	waitNoLifecycleGoroutines(t)
}

func TestInitializeTwice(t *testing.T) {
	p := &lifecyclePart{allParts: allParts{id: "p"}}
	c := newCloud(t, provider.Config{LoadBalancer: p})
	first, second := &fakeBuilder{id: "first"}, &fakeBuilder{id: "second"}
	stop1, stop2 := make(chan struct{}), make(chan struct{})
	c.Initialize(first, stop1)
	c.Initialize(second, stop2)
	if got := lifecycleGoroutines(); got != 2 {
		t.Errorf("two Initialize calls left %d goroutines, want 2 (one supervisor, one runner)", got)
	}
	if inits, _, _ := p.counts(); inits != 1 {
		t.Errorf("part initialized %d times, want 1", inits)
	}
	if p.builder != first {
		t.Errorf("part got builder %v, want the first call's", p.builder)
	}
	// The first call's stop governs; stop2 is never closed.
	close(stop1)
	waitClosed(t, c.Done(), "Done after the first stop")
	if _, runs, _ := p.counts(); runs != 1 {
		t.Errorf("Run called %d times, want 1", runs)
	}
	waitNoLifecycleGoroutines(t)
}

func TestInitializeFailure(t *testing.T) {
	errBoom := errors.New("no credentials")
	failing := &lifecyclePart{allParts: allParts{id: "failing"}, initErr: errBoom}
	healthy := &lifecyclePart{allParts: allParts{id: "healthy"}}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	c := newCloud(t, provider.Config{
		LoadBalancer: failing,
		InstancesV2:  failing,
		Routes:       healthy,
		Logger:       logger,
	})
	if err := c.Err(); err != nil {
		t.Fatalf("Err() before Initialize = %v, want nil", err)
	}
	stop := make(chan struct{})
	c.Initialize(nil, stop)

	err := c.Err()
	if !errors.Is(err, errBoom) {
		t.Fatalf("Err() = %v, want it to wrap the part's error", err)
	}
	for _, s := range []string{`"test"`, "LoadBalancer+InstancesV2", "*provider_test.lifecyclePart"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Err() = %q, want it to mention %q", err, s)
		}
	}
	// The failing part stays available: the provider cannot withdraw it.
	if lb, ok := c.LoadBalancer(); !ok || lb != failing {
		t.Errorf("LoadBalancer() = %v, %v after a failed Initialize; want the part", lb, ok)
	}

	var errorsLogged []ktesting.LogEntry
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Type == ktesting.LogError {
			errorsLogged = append(errorsLogged, e)
		}
	}
	if len(errorsLogged) != 1 || !errors.Is(errorsLogged[0].Err, errBoom) {
		t.Errorf("logged errors = %+v, want exactly one, for the failing part", errorsLogged)
	}

	close(stop)
	waitClosed(t, c.Done(), "Done after stop")
	if _, runs, _ := failing.counts(); runs != 0 {
		t.Errorf("failing part's Run called %d times, want 0", runs)
	}
	if _, runs, returned := healthy.counts(); runs != 1 || returned != 1 {
		t.Errorf("healthy part: Run called %d times, returned %d times; want 1 and 1", runs, returned)
	}
	waitNoLifecycleGoroutines(t)
}

// TestStopDuringInitialize closes stop while a part's Initialize is blocked
// on its context: the context must be cancelled already.
func TestStopDuringInitialize(t *testing.T) {
	entered := make(chan struct{})
	slow := &lifecyclePart{allParts: allParts{id: "slow"}, initBlocks: true, initEntered: entered}
	c := newCloud(t, provider.Config{LoadBalancer: slow})
	stop := make(chan struct{})
	go func() {
		<-entered
		close(stop)
	}()
	initialized := make(chan struct{})
	go func() {
		c.Initialize(nil, stop)
		close(initialized)
	}()
	waitClosed(t, initialized, "Initialize's return after stop")
	waitClosed(t, c.Done(), "Done after stop")
	waitNoLifecycleGoroutines(t)
}

func TestStopClosedBeforeInitialize(t *testing.T) {
	p := &lifecyclePart{allParts: allParts{id: "p"}}
	c := newCloud(t, provider.Config{LoadBalancer: p})
	stop := make(chan struct{})
	close(stop)
	c.Initialize(nil, stop)
	waitClosed(t, c.Done(), "Done")
	if _, runs, returned := p.counts(); runs != 1 || returned != 1 {
		t.Errorf("Run called %d times, returned %d times; want 1 and 1", runs, returned)
	}
	waitNoLifecycleGoroutines(t)
}

// earlyRunner's Run returns without waiting for its context.
type earlyRunner struct {
	allParts
	returned chan struct{}
}

func (r *earlyRunner) Run(context.Context) { close(r.returned) }

func TestRunReturningEarly(t *testing.T) {
	r := &earlyRunner{returned: make(chan struct{})}
	c := newCloud(t, provider.Config{Routes: r})
	stop := make(chan struct{})
	c.Initialize(nil, stop)
	waitClosed(t, r.returned, "early Run's return")
	if isClosed(c.Done()) {
		t.Fatal("Done closed before stop although a Run returned early")
	}
	close(stop)
	waitClosed(t, c.Done(), "Done after stop")
	waitNoLifecycleGoroutines(t)
}

func TestSetInformers(t *testing.T) {
	shared := &lifecyclePart{allParts: allParts{id: "shared"}}
	other := &lifecyclePart{allParts: allParts{id: "other"}}
	var typedNil *lifecyclePart
	c := newCloud(t, provider.Config{
		LoadBalancer: shared,
		InstancesV2:  shared,
		Instances:    typedNil,
		Zones:        &allParts{id: "not an informer user"},
		Routes:       other,
	})
	factory := informers.NewSharedInformerFactory(nil, 0)
	c.SetInformers(factory)
	for _, p := range []*lifecyclePart{shared, other} {
		if len(p.informers) != 1 || p.informers[0] != factory {
			t.Errorf("part %s got informers %v, want exactly the one factory", p.id, p.informers)
		}
	}
	c.SetInformers(factory)
	if len(shared.informers) != 2 {
		t.Errorf("second SetInformers: part got %d calls in total, want 2", len(shared.informers))
	}
}

// uncomparable is a part holding a slice, so == cannot compare it.
type uncomparable struct {
	allParts
	inits *int
	_     []int
}

func (u uncomparable) Initialize(context.Context, cloudprovider.ControllerClientBuilder) error {
	*u.inits++
	return nil
}

func TestUncomparablePart(t *testing.T) {
	inits := 0
	u := uncomparable{inits: &inits}
	c := newCloud(t, provider.Config{LoadBalancer: u, InstancesV2: u})
	if _, ok := c.LoadBalancer(); !ok {
		t.Error("LoadBalancer() = false")
	}
	if _, ok := c.InstancesV2(); !ok {
		t.Error("InstancesV2() = false")
	}
	stop := make(chan struct{})
	c.Initialize(nil, stop)
	// As documented on Config: values == cannot compare are never merged.
	if inits != 2 {
		t.Errorf("uncomparable part initialized %d times, want once per role (2)", inits)
	}
	close(stop)
	waitClosed(t, c.Done(), "Done")
	waitNoLifecycleGoroutines(t)
}
