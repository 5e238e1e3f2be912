package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"
)

// poll calls check every pollInterval until it reports done, for at most
// timeout (or until ctx ends), and returns its last value. On timeout the
// error names what it waited for and what check last saw (its last
// non-nil seen, called then and only then: describing can cost reads), and
// wraps ctx's error and check's last error.
func poll[T any](ctx context.Context, timeout time.Duration, what string, check func(context.Context) (v T, done bool, seen func() string, err error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var seen func() string
	var lastErr error
	for {
		v, done, s, err := check(ctx)
		if err == nil && done {
			return v, nil
		}
		if s != nil {
			seen = s
		}
		if err != nil && ctx.Err() == nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			var zero T
			err := fmt.Errorf("cluster: waiting for %s: %w", what, ctx.Err())
			if lastErr != nil {
				err = fmt.Errorf("%w; last error: %w", err, lastErr)
			}
			if s := describe(seen); s != "" {
				err = fmt.Errorf("%w; last seen: %s", err, s)
			}
			return zero, err
		case <-ticker.C:
		}
	}
}

// describe returns seen(), or "" for nil.
func describe(seen func() string) string {
	if seen == nil {
		return ""
	}
	return seen()
}

// Wait calls cond every few milliseconds until it reports true, for what
// the cluster's objects do not show, such as the state of the cloud
// behind the provider. It waits at most Config.Timeout (a shorter ctx
// deadline wins). An error from cond does not end the wait; on timeout the
// error says "waiting for <what>" and gives the last error cond returned.
func (h *Harness) Wait(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	_, err := poll(ctx, h.cfg.Timeout, what, func(ctx context.Context) (struct{}, bool, func() string, error) {
		done, err := cond(ctx)
		return struct{}{}, done, nil, err
	})
	return err
}

// WaitForIngress waits until the Service has an ingress in its
// status.loadBalancer and returns it as last read.
func (h *Harness) WaitForIngress(ctx context.Context, namespace, name string) (*v1.Service, error) {
	return h.waitService(ctx, namespace, name, "an ingress", func(s *v1.Service) bool {
		return len(s.Status.LoadBalancer.Ingress) > 0
	})
}

// WaitForService waits until done reports true for the Service, described
// by what ("Service ns/name to have <what>"), and returns it as last read;
// on timeout the error shows the Service as last read and its Warning
// events. Wait is for conditions the cluster's objects do not show.
func (h *Harness) WaitForService(ctx context.Context, namespace, name, what string, done func(*v1.Service) bool) (*v1.Service, error) {
	return h.waitService(ctx, namespace, name, what, done)
}

func (h *Harness) waitService(ctx context.Context, namespace, name, what string, done func(*v1.Service) bool) (*v1.Service, error) {
	return poll(ctx, h.cfg.Timeout, fmt.Sprintf("Service %s/%s to have %s", namespace, name, what), func(ctx context.Context) (*v1.Service, bool, func() string, error) {
		s, err := h.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false, nil, err
		}
		return s, done(s), func() string { return describeService(s) + h.warnings(context.WithoutCancel(ctx), s.Namespace, s.UID) }, nil
	})
}

// WaitForNodeInitialized waits until the cloud node controller has
// initialized the node (the uninitialized taint is gone and it has a
// ProviderID) and returns it as last read. On timeout the error shows the
// node as last read, its Warning events and the last error the cloud's
// InstancesV2 returned for it (the cloud node controller records no event
// when the cloud fails).
func (h *Harness) WaitForNodeInitialized(ctx context.Context, name string) (*v1.Node, error) {
	return poll(ctx, h.cfg.Timeout, fmt.Sprintf("node %s to be initialized (taint %s gone, spec.providerID set)", name, cloudproviderapi.TaintExternalCloudProvider), func(ctx context.Context) (*v1.Node, bool, func() string, error) {
		n, err := h.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false, nil, err
		}
		seen := h.seenNode(ctx, n)
		return n, !uninitialized(n) && n.Spec.ProviderID != "", func() string {
			s := seen()
			if err := h.nodeErrs.get(name); err != nil {
				s += "; the cloud's last error for it: " + err.Error()
			}
			return s
		}, nil
	})
}

// WaitForRouteCreated waits until the route controller has created the
// routes to every pod CIDR of the node (its NetworkUnavailable condition is
// False, reason RouteCreated) and returns the node as last read.
func (h *Harness) WaitForRouteCreated(ctx context.Context, name string) (*v1.Node, error) {
	return poll(ctx, h.cfg.Timeout, fmt.Sprintf("the routes to node %s's pod CIDRs (condition %s False, reason RouteCreated)", name, v1.NodeNetworkUnavailable), func(ctx context.Context) (*v1.Node, bool, func() string, error) {
		n, err := h.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false, nil, err
		}
		done := slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool {
			return c.Type == v1.NodeNetworkUnavailable && c.Status == v1.ConditionFalse && c.Reason == "RouteCreated"
		})
		return n, done, h.seenNode(ctx, n), nil
	})
}

// WaitForNodeDeleted waits until the node is gone, as the cloud node
// lifecycle controller deletes a node whose instance no longer exists.
func (h *Harness) WaitForNodeDeleted(ctx context.Context, name string) error {
	_, err := poll(ctx, h.cfg.Timeout, fmt.Sprintf("node %s to be deleted", name), func(ctx context.Context) (struct{}, bool, func() string, error) {
		n, err := h.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return struct{}{}, true, nil, nil
		}
		if err != nil {
			return struct{}{}, false, nil, err
		}
		return struct{}{}, false, h.seenNode(ctx, n), nil
	})
	return err
}

// DeleteService deletes a Service as the API server does one with
// finalizers, which the fake clientset does not: it sets the deletion
// timestamp, waits for the controllers to remove their finalizers (the
// service controller's, and class controllers' of Config.Classes, after
// their clouds deleted the load balancers), then deletes the object.
func (h *Harness) DeleteService(ctx context.Context, namespace, name string) error {
	services := h.Client.CoreV1().Services(namespace)
	s, err := services.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cluster: deleting Service %s/%s: %w", namespace, name, err)
	}
	if s.DeletionTimestamp == nil {
		s.DeletionTimestamp = ptr.To(metav1.Now())
		if _, err := services.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("cluster: marking Service %s/%s for deletion: %w", namespace, name, err)
		}
	}
	if _, err := h.waitService(ctx, namespace, name, "no finalizers", func(s *v1.Service) bool { return len(s.Finalizers) == 0 }); err != nil {
		return err
	}
	if err := services.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster: deleting Service %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Warnings returns the messages of the Warning events recorded on the
// object with uid, oldest first, as "Reason: message".
func (h *Harness) Warnings(ctx context.Context, namespace string, uid types.UID) ([]string, error) {
	evs, err := h.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(evs.Items, func(a, b v1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	var out []string
	for _, ev := range evs.Items {
		if ev.InvolvedObject.UID == uid && ev.Type == v1.EventTypeWarning {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out, nil
}

// warnings formats the object's Warning events for a "last seen" line.
func (h *Harness) warnings(ctx context.Context, namespace string, uid types.UID) string {
	w, err := h.Warnings(ctx, namespace, uid)
	if err != nil || len(w) == 0 {
		return ""
	}
	return "; warning events: [" + strings.Join(w, " | ") + "]"
}

func describeService(s *v1.Service) string {
	var ing []string
	for _, i := range s.Status.LoadBalancer.Ingress {
		e := i.IP + i.Hostname
		for _, p := range i.Ports {
			e += fmt.Sprintf(" %s/%d", p.Protocol, p.Port)
		}
		ing = append(ing, e)
	}
	del := "no"
	if s.DeletionTimestamp != nil {
		del = "yes"
	}
	return fmt.Sprintf("Service %s/%s type %s, status.loadBalancer.ingress %q, finalizers %q, being deleted: %s",
		s.Namespace, s.Name, s.Spec.Type, ing, s.Finalizers, del)
}

// seenNode describes n and its Warning events, for a wait's "last seen"
// (read when the wait has timed out: ctx has ended by then).
func (h *Harness) seenNode(ctx context.Context, n *v1.Node) func() string {
	return func() string { return describeNode(n) + h.warnings(context.WithoutCancel(ctx), "", n.UID) }
}

func describeNode(n *v1.Node) string {
	var taints, addrs, conds []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.Key+":"+string(t.Effect))
	}
	for _, a := range n.Status.Addresses {
		addrs = append(addrs, string(a.Type)+"="+a.Address)
	}
	for _, c := range n.Status.Conditions {
		conds = append(conds, string(c.Type)+"="+string(c.Status))
	}
	return fmt.Sprintf("node %s providerID %q, taints %q, addresses %q, conditions %q", n.Name, n.Spec.ProviderID, taints, addrs, conds)
}

func uninitialized(n *v1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool {
		return t.Key == cloudproviderapi.TaintExternalCloudProvider
	})
}
