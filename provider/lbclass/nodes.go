package lbclass

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// toBeDeletedTaint is the cluster autoscaler's taint on a node it is about
// to remove.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// stableNodes returns the nodes a load balancer is given: upstream's stable
// set (not being deleted, included, not tainted for deletion).
func (c *Controller) stableNodes() ([]*v1.Node, error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("lbclass: list nodes from the cache: %w", err)
	}
	var out []*v1.Node
	for _, n := range all {
		if n.DeletionTimestamp == nil && included(n) && !taintedForDeletion(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// included reports whether n may receive load-balanced traffic by its
// labels: an exclude label that does not parse as false excludes it.
func included(n *v1.Node) bool {
	v, ok := n.Labels[v1.LabelNodeExcludeBalancers]
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}

func taintedForDeletion(n *v1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			return true
		}
	}
	return false
}

// nodeChanged reports whether a node update may change the node set, as
// upstream decides: inclusion or ProviderID changed. Syncs compare the
// set itself, so this only saves waking them up.
func nodeChanged(old, cur *v1.Node) bool {
	return included(old) != included(cur) || old.Spec.ProviderID != cur.Spec.ProviderID
}

// nodesEqual reports whether two node sets have the same names and
// ProviderIDs, what upstream compares before calling UpdateLoadBalancer.
func nodesEqual(a, b []*v1.Node) bool {
	if len(a) != len(b) {
		return false
	}
	ids := make(map[string]string, len(a))
	for _, n := range a {
		ids[n.Name] = n.Spec.ProviderID
	}
	for _, n := range b {
		id, ok := ids[n.Name]
		if !ok || id != n.Spec.ProviderID {
			return false
		}
	}
	return true
}
