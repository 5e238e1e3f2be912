package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake/cluster"
)

// InstancesV2Setup is an InstancesV2 for one check and the nodes to ask it
// about.
type InstancesV2Setup struct {
	// Instances is the implementation under test. Required.
	Instances cloudprovider.InstancesV2
	// Existing are nodes whose instances exist and run, as the cloud node
	// controllers see them once initialized (spec.providerID set, unless
	// your cloud finds its instances by node name). Required. The checks
	// also ask about each without its spec.providerID, as the cloud node
	// controller does before it initializes the node. They must be your
	// cloud's nodes: DefaultNodes' conformance:// ProviderIDs are refused.
	Existing []*v1.Node
	// Shutdown are nodes whose instances exist but are shut down; nil =
	// none to check PromiseShutdown with (see Skip).
	Shutdown []*v1.Node
	// Gone are nodes whose instances are really gone (deleted in the
	// cloud); nil = none to check PromiseGone with (see Skip).
	Gone []*v1.Node
	// Foreign are nodes whose ProviderID belongs to another cloud; nil =
	// one node with ProviderID "other-cloud://foreign-1".
	Foreign []*v1.Node
	// Zones are the zone (FailureDomain) and Region InstanceMetadata gives
	// each Existing node, by node name: the topology labels the cloud node
	// controller sets from them. Every Existing node has an entry (the
	// zero Zone for a node with neither); nil = none to check PromiseZone
	// with (see Skip).
	Zones map[string]cloudprovider.Zone
	// Skip names the promises this setup leaves unchecked, by their
	// constants (PromiseGone, PromiseShutdown, PromiseZone); their checks
	// are skipped when the fields that check them are not given. A check
	// with nothing to check whose promise is not named here fails, saying
	// which field would check it. Naming any other promise is a setup
	// error.
	Skip []string
}

// The promises of a cloudprovider.InstancesV2.
const (
	promiseExists         = "InstanceExists is true for instances that exist"
	promiseStable         = "InstanceMetadata is stable across calls"
	promiseForeign        = "A foreign ProviderID is an error, never reported gone"
	promiseNodesReadOnly  = "Nodes passed in are never modified"
	promiseNoProviderID   = "An existing node without spec.providerID is found"
	promiseProviderID     = "InstanceMetadata's ProviderID is the node's spec.providerID"
	promiseRunning        = "InstanceShutdown is false for running instances"
	metadataCallsPerCheck = 3
)

// The promises of a cloudprovider.InstancesV2 that an InstancesV2Setup may
// leave unchecked, naming them in its Skip.
const (
	// PromiseGone is checked with InstancesV2Setup.Gone.
	PromiseGone = "InstanceExists is false for instances that are gone"
	// PromiseShutdown is checked with InstancesV2Setup.Shutdown.
	PromiseShutdown = "InstanceShutdown is true for instances shut down, which still exist"
	// PromiseZone is checked with InstancesV2Setup.Zones.
	PromiseZone = "InstanceMetadata's Zone and Region are the node's"
)

// instancesOptional are the promises an InstancesV2Setup may leave
// unchecked.
var (
	instGone          = optional{PromiseGone, "PromiseGone", "give InstancesV2Setup.Gone nodes whose instances are gone"}
	instShutdown      = optional{PromiseShutdown, "PromiseShutdown", "give InstancesV2Setup.Shutdown nodes whose instances are shut down"}
	instZone          = optional{PromiseZone, "PromiseZone", "give InstancesV2Setup.Zones the zone and region of every Existing node"}
	instancesOptional = []optional{instGone, instShutdown, instZone}
)

// InstancesV2Checks returns the checks of the cloudprovider.InstancesV2
// contract the cloud node controllers rely on, one per promise.
func InstancesV2Checks() []Check[InstancesV2Setup] {
	checks := []Check[InstancesV2Setup]{
		{promiseExists, checkExists},
		{PromiseGone, checkGone},
		{promiseStable, checkStable},
		{promiseForeign, checkForeign},
		{promiseNodesReadOnly, checkNodesReadOnly},
		{promiseNoProviderID, checkNoProviderID},
		{promiseProviderID, checkProviderID},
		{promiseRunning, checkRunning},
		{PromiseShutdown, checkShutdown},
		{PromiseZone, checkZone},
	}
	for i := range checks {
		c := checks[i].Run
		checks[i].Run = func(ctx context.Context, s InstancesV2Setup) error {
			if err := s.validate(); err != nil {
				return err
			}
			return c(ctx, s)
		}
	}
	return checks
}

// validate reports setup mistakes, which are not broken promises.
func (s InstancesV2Setup) validate() error {
	if s.Instances == nil {
		return errors.New("InstancesV2Setup.Instances is nil")
	}
	if len(s.Existing) == 0 {
		return errors.New("InstancesV2Setup.Existing is empty")
	}
	if err := validateSkip("InstancesV2Setup", s.Skip, instancesOptional); err != nil {
		return err
	}
	for field, nodes := range map[string][]*v1.Node{"Existing": s.Existing, "Gone": s.Gone, "Shutdown": s.Shutdown} {
		for _, n := range nodes {
			if strings.HasPrefix(n.Spec.ProviderID, defaultScheme) {
				return fmt.Errorf("InstancesV2Setup.%s: node %s has providerID %q, DefaultNodes' own, which no cloud knows: give nodes of your cloud (cluster.Node with cluster.ProviderID)", field, n.Name, n.Spec.ProviderID)
			}
		}
	}
	if s.Zones != nil {
		for _, n := range s.Existing {
			if _, ok := s.Zones[n.Name]; !ok {
				return fmt.Errorf("InstancesV2Setup.Zones has no entry for Existing node %s: give its zone and region (the zero Zone for neither)", n.Name)
			}
		}
	}
	return nil
}

// RunInstancesV2 runs InstancesV2Checks as subtests of t, each on a fresh
// setup from newSetup.
func RunInstancesV2(t *testing.T, newSetup func(testing.TB) InstancesV2Setup) {
	t.Helper()
	run(t, InstancesV2Checks(), newSetup)
}

func (s InstancesV2Setup) foreign() []*v1.Node {
	if s.Foreign != nil {
		return s.Foreign
	}
	return []*v1.Node{cluster.Node("foreign-1", cluster.Initialized(), cluster.ProviderID("other-cloud://foreign-1"))}
}

func checkExists(ctx context.Context, s InstancesV2Setup) error {
	for _, n := range s.Existing {
		ok, err := retry(ctx, "InstanceExists "+n.Name, func() (bool, error) { return s.Instances.InstanceExists(ctx, n) })
		if err != nil {
			return broken(promiseExists, "InstanceExists of existing node %s failed: %v", n.Name, err)
		}
		if !ok {
			return broken(promiseExists, "InstanceExists reports existing node %s (providerID %q) gone: the lifecycle controller would delete it", n.Name, n.Spec.ProviderID)
		}
	}
	return nil
}

func checkGone(ctx context.Context, s InstancesV2Setup) error {
	if len(s.Gone) == 0 {
		return unchecked("InstancesV2Setup", s.Skip, instGone, "InstancesV2Setup.Gone is empty")
	}
	for _, n := range s.Gone {
		ok, err := retry(ctx, "InstanceExists "+n.Name, func() (bool, error) { return s.Instances.InstanceExists(ctx, n) })
		if err != nil {
			return broken(PromiseGone, "InstanceExists of gone node %s failed: %v", n.Name, err)
		}
		if ok {
			return broken(PromiseGone, "InstanceExists reports gone node %s (providerID %q) as existing: the lifecycle controller would never delete it", n.Name, n.Spec.ProviderID)
		}
	}
	return nil
}

func checkStable(ctx context.Context, s InstancesV2Setup) error {
	for _, n := range s.Existing {
		var first *cloudprovider.InstanceMetadata
		for i := range metadataCallsPerCheck {
			md, err := retry(ctx, "InstanceMetadata "+n.Name, func() (*cloudprovider.InstanceMetadata, error) { return s.Instances.InstanceMetadata(ctx, n) })
			if err != nil {
				return broken(promiseStable, "InstanceMetadata of node %s, call %d: %v", n.Name, i+1, err)
			}
			if md == nil || md.ProviderID == "" {
				return broken(promiseStable, "InstanceMetadata of node %s, call %d, has no ProviderID: %+v", n.Name, i+1, md)
			}
			if first == nil {
				first = md
				continue
			}
			if !apiequality.Semantic.DeepEqual(first, md) {
				return broken(promiseStable, "InstanceMetadata of node %s changed between call 1 and call %d (-first +later):\n%s", n.Name, i+1, diff.Diff(first, md))
			}
		}
	}
	return nil
}

func checkForeign(ctx context.Context, s InstancesV2Setup) error {
	for _, n := range s.foreign() {
		ok, err := retry(ctx, "InstanceExists "+n.Name, func() (bool, error) { return s.Instances.InstanceExists(ctx, n) })
		if err == nil && !ok {
			return broken(promiseForeign, "InstanceExists of node %s, providerID %q of another cloud, reports it gone with no error: the lifecycle controller would delete another cloud's node", n.Name, n.Spec.ProviderID)
		}
	}
	return nil
}

func checkNodesReadOnly(ctx context.Context, s InstancesV2Setup) error {
	nodes := append(append(append([]*v1.Node(nil), s.Existing...), s.Gone...), s.foreign()...)
	for _, n := range nodes {
		before := n.DeepCopy()
		// Errors are other checks' business: only the node matters here.
		_, _ = s.Instances.InstanceExists(ctx, n)
		_, _ = s.Instances.InstanceShutdown(ctx, n)
		_, _ = s.Instances.InstanceMetadata(ctx, n)
		if !apiequality.Semantic.DeepEqual(before, n) {
			return broken(promiseNodesReadOnly, "a call modified node %s (-before +after):\n%s", n.Name, diff.Diff(before, n))
		}
	}
	return nil
}

// withoutProviderID returns a copy of n as kubelet registers it, before the
// cloud node controller sets its spec.providerID.
func withoutProviderID(n *v1.Node) *v1.Node {
	c := n.DeepCopy()
	c.Spec.ProviderID = ""
	return c
}

func checkNoProviderID(ctx context.Context, s InstancesV2Setup) error {
	for _, orig := range s.Existing {
		n := withoutProviderID(orig)
		ok, err := retry(ctx, "InstanceExists "+n.Name, func() (bool, error) { return s.Instances.InstanceExists(ctx, n) })
		if err != nil {
			return broken(promiseNoProviderID, "InstanceExists of existing node %s without spec.providerID failed: %v", n.Name, err)
		}
		if !ok {
			return broken(promiseNoProviderID, "InstanceExists reports existing node %s without spec.providerID gone: the lifecycle controller would delete it before it is initialized", n.Name)
		}
		md, err := retry(ctx, "InstanceMetadata "+n.Name, func() (*cloudprovider.InstanceMetadata, error) { return s.Instances.InstanceMetadata(ctx, n) })
		if err != nil {
			return broken(promiseNoProviderID, "InstanceMetadata of existing node %s without spec.providerID failed: %v: the cloud node controller could not initialize it", n.Name, err)
		}
		if md == nil || md.ProviderID == "" {
			return broken(promiseNoProviderID, "InstanceMetadata of existing node %s without spec.providerID gives no ProviderID: %+v", n.Name, md)
		}
	}
	return nil
}

func checkProviderID(ctx context.Context, s InstancesV2Setup) error {
	for _, n := range s.Existing {
		if n.Spec.ProviderID == "" {
			continue
		}
		md, err := retry(ctx, "InstanceMetadata "+n.Name, func() (*cloudprovider.InstanceMetadata, error) { return s.Instances.InstanceMetadata(ctx, n) })
		if err != nil {
			return broken(promiseProviderID, "InstanceMetadata of node %s failed: %v", n.Name, err)
		}
		if md == nil || md.ProviderID != n.Spec.ProviderID {
			return broken(promiseProviderID, "InstanceMetadata of node %s gives ProviderID %q, the node's spec.providerID is %q", n.Name, providerIDOf(md), n.Spec.ProviderID)
		}
		bare := withoutProviderID(n)
		md, err = retry(ctx, "InstanceMetadata "+n.Name, func() (*cloudprovider.InstanceMetadata, error) { return s.Instances.InstanceMetadata(ctx, bare) })
		if err != nil {
			return broken(promiseProviderID, "InstanceMetadata of node %s without spec.providerID failed: %v", n.Name, err)
		}
		if md == nil || md.ProviderID != n.Spec.ProviderID {
			return broken(promiseProviderID, "InstanceMetadata of node %s without spec.providerID gives ProviderID %q, which the cloud node controller would set; the node's own is %q", n.Name, providerIDOf(md), n.Spec.ProviderID)
		}
	}
	return nil
}

func providerIDOf(md *cloudprovider.InstanceMetadata) string {
	if md == nil {
		return ""
	}
	return md.ProviderID
}

func checkRunning(ctx context.Context, s InstancesV2Setup) error {
	for _, n := range s.Existing {
		down, err := retry(ctx, "InstanceShutdown "+n.Name, func() (bool, error) { return s.Instances.InstanceShutdown(ctx, n) })
		if err != nil {
			return broken(promiseRunning, "InstanceShutdown of running node %s failed: %v", n.Name, err)
		}
		if down {
			return broken(promiseRunning, "InstanceShutdown reports running node %s (providerID %q) shut down: the lifecycle controller would taint it", n.Name, n.Spec.ProviderID)
		}
	}
	return nil
}

func checkShutdown(ctx context.Context, s InstancesV2Setup) error {
	if len(s.Shutdown) == 0 {
		return unchecked("InstancesV2Setup", s.Skip, instShutdown, "InstancesV2Setup.Shutdown is empty")
	}
	for _, n := range s.Shutdown {
		down, err := retry(ctx, "InstanceShutdown "+n.Name, func() (bool, error) { return s.Instances.InstanceShutdown(ctx, n) })
		if err != nil {
			return broken(PromiseShutdown, "InstanceShutdown of shut-down node %s failed: %v", n.Name, err)
		}
		if !down {
			return broken(PromiseShutdown, "InstanceShutdown reports shut-down node %s (providerID %q) running: the lifecycle controller would not taint it", n.Name, n.Spec.ProviderID)
		}
		ok, err := retry(ctx, "InstanceExists "+n.Name, func() (bool, error) { return s.Instances.InstanceExists(ctx, n) })
		if err != nil {
			return broken(PromiseShutdown, "InstanceExists of shut-down node %s failed: %v", n.Name, err)
		}
		if !ok {
			return broken(PromiseShutdown, "InstanceExists reports shut-down node %s gone: the lifecycle controller would delete a node that is only off", n.Name)
		}
	}
	return nil
}

func checkZone(ctx context.Context, s InstancesV2Setup) error {
	if s.Zones == nil {
		return unchecked("InstancesV2Setup", s.Skip, instZone, "InstancesV2Setup.Zones is nil")
	}
	for _, n := range s.Existing {
		want := s.Zones[n.Name]
		// The cloud node controller labels a node from the metadata it
		// gets before it sets spec.providerID; later calls must agree.
		for _, node := range []*v1.Node{withoutProviderID(n), n} {
			md, err := retry(ctx, "InstanceMetadata "+n.Name, func() (*cloudprovider.InstanceMetadata, error) { return s.Instances.InstanceMetadata(ctx, node) })
			if err != nil {
				return broken(PromiseZone, "InstanceMetadata of node %s (providerID %q) failed: %v", n.Name, node.Spec.ProviderID, err)
			}
			var got cloudprovider.Zone
			if md != nil {
				got = cloudprovider.Zone{FailureDomain: md.Zone, Region: md.Region}
			}
			if got != want {
				return broken(PromiseZone, "InstanceMetadata of node %s (providerID %q) gives zone %q, region %q; InstancesV2Setup.Zones says zone %q, region %q: the cloud node controller would label the node %s=%q, %s=%q",
					n.Name, node.Spec.ProviderID, got.FailureDomain, got.Region, want.FailureDomain, want.Region, v1.LabelTopologyZone, got.FailureDomain, v1.LabelTopologyRegion, got.Region)
			}
		}
	}
	return nil
}
