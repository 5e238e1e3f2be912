package conformance

import (
	"context"
	"fmt"
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
	// Existing are nodes whose instances exist. Required.
	Existing []*v1.Node
	// Gone are nodes whose instances are really gone (deleted in the
	// cloud); nil = the implementation cannot tell, and that check is
	// skipped.
	Gone []*v1.Node
	// Foreign are nodes whose ProviderID belongs to another cloud; nil =
	// one node with ProviderID "other-cloud://foreign-1".
	Foreign []*v1.Node
}

// The promises of a cloudprovider.InstancesV2.
const (
	promiseExists         = "InstanceExists is true for instances that exist"
	promiseGone           = "InstanceExists is false for instances that are gone"
	promiseStable         = "InstanceMetadata is stable across calls"
	promiseForeign        = "A foreign ProviderID is an error, never reported gone"
	promiseNodesReadOnly  = "Nodes passed in are never modified"
	metadataCallsPerCheck = 3
)

// InstancesV2Checks returns the checks of the cloudprovider.InstancesV2
// contract the cloud node controllers rely on, one per promise.
func InstancesV2Checks() []Check[InstancesV2Setup] {
	return []Check[InstancesV2Setup]{
		{promiseExists, checkExists},
		{promiseGone, checkGone},
		{promiseStable, checkStable},
		{promiseForeign, checkForeign},
		{promiseNodesReadOnly, checkNodesReadOnly},
	}
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
	if len(s.Existing) == 0 {
		return fmt.Errorf("InstancesV2Setup.Existing is empty")
	}
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
		return skipped(promiseGone, "InstancesV2Setup.Gone is empty")
	}
	for _, n := range s.Gone {
		ok, err := retry(ctx, "InstanceExists "+n.Name, func() (bool, error) { return s.Instances.InstanceExists(ctx, n) })
		if err != nil {
			return broken(promiseGone, "InstanceExists of gone node %s failed: %v", n.Name, err)
		}
		if ok {
			return broken(promiseGone, "InstanceExists reports gone node %s (providerID %q) as existing: the lifecycle controller would never delete it", n.Name, n.Spec.ProviderID)
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
