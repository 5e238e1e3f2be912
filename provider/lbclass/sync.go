package lbclass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"
)

// sync brings the load balancer of the Service named key to what the API
// server asks: served when wanted, else cleaned up if this controller may
// hold one.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	svc, err := c.services.Services(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		// Gone without our finalizer (someone removed it): clean up what
		// we remember serving.
		if prev := c.lookup(key); prev != nil {
			return c.cleanup(ctx, key, prev.svc, false)
		}
		return nil
	case err != nil:
		return fmt.Errorf("lbclass: read service %s from the cache: %w", key, err)
	}
	svc = svc.DeepCopy()
	// Deleted and re-created under the same name while we held no
	// finalizer: the old one's load balancer goes first.
	if prev := c.lookup(key); prev != nil && prev.svc.UID != svc.UID {
		if err := c.cleanup(ctx, key, prev.svc, false); err != nil {
			return err
		}
	}
	if !c.wants(svc) {
		if !hasFinalizer(svc, c.cfg.Finalizer) && c.lookup(key) == nil {
			return nil
		}
		return c.cleanup(ctx, key, svc, true)
	}
	return c.serve(ctx, key, svc)
}

// serve ensures svc's load balancer, or only updates its nodes when svc is
// unchanged since it was last ensured.
func (c *Controller) serve(ctx context.Context, key string, svc *v1.Service) error {
	nodes, err := c.stableNodes()
	if err != nil {
		return err
	}
	prev := c.lookup(key)
	if prev != nil && prev.current && !needsEnsure(prev.svc, svc) {
		if nodesEqual(prev.nodes, nodes) {
			return nil
		}
		return c.updateNodes(ctx, key, svc, nodes)
	}

	logger := klog.FromContext(ctx)
	// A periodic resync of an unchanged Service is quiet.
	quiet := prev != nil && prev.resync && !needsEnsure(prev.svc, svc)
	logger.V(2).Info("Ensuring load balancer", "service", klog.KObj(svc), "resync", quiet)
	if !quiet {
		c.recorder.Event(svc, v1.EventTypeNormal, "EnsuringLoadBalancer", "Ensuring load balancer")
	}
	if err := c.patchFinalizers(ctx, svc, true); err != nil {
		return c.syncFailed(svc, fmt.Errorf("add load balancer cleanup finalizer: %w", err))
	}
	if len(nodes) == 0 {
		c.recorder.Event(svc, v1.EventTypeWarning, "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer")
	}
	// Remembered before the call, so a failed Ensure is still cleaned up
	// if the Service goes away; a failed quiet one stays quiet.
	c.remember(key, svc, nodes, false)
	if quiet {
		c.markResync(key)
	}
	previous := svc.Status.LoadBalancer.DeepCopy()
	status, err := c.cfg.LoadBalancer.EnsureLoadBalancer(ctx, c.cfg.ClusterName, svc, nodes)
	switch {
	case err == cloudprovider.ImplementedElsewhere: //nolint:errorlint // upstream's contract: compared, never wrapped
		logger.V(4).Info("Load balancer implemented elsewhere", "service", klog.KObj(svc))
		c.remember(key, svc, nodes, true)
		return nil
	case err != nil:
		// %w keeps an api.RetryError visible to the worker.
		return c.syncFailed(svc, fmt.Errorf("ensure load balancer: %w", err))
	case status == nil:
		return c.syncFailed(svc, errors.New("ensure load balancer: the load balancer returned a nil status"))
	}
	if !quiet {
		c.recorder.Event(svc, v1.EventTypeNormal, "EnsuredLoadBalancer", "Ensured load balancer")
	}
	c.remember(key, svc, nodes, true)
	if err := c.patchStatus(ctx, svc, previous, status); err != nil {
		c.markStale(key)
		return c.syncFailed(svc, err)
	}
	return nil
}

// updateNodes gives the load balancer of an unchanged svc the new node set.
func (c *Controller) updateNodes(ctx context.Context, key string, svc *v1.Service, nodes []*v1.Node) error {
	klog.FromContext(ctx).V(2).Info("Updating load balancer nodes", "service", klog.KObj(svc), "nodes", len(nodes))
	err := c.cfg.LoadBalancer.UpdateLoadBalancer(ctx, c.cfg.ClusterName, svc, nodes)
	switch {
	case err == nil:
		if len(nodes) == 0 {
			c.recorder.Event(svc, v1.EventTypeWarning, "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer")
		} else {
			c.recorder.Event(svc, v1.EventTypeNormal, "UpdatedLoadBalancer", "Updated load balancer with new hosts")
		}
		c.remember(key, svc, nodes, true)
		return nil
	case err == cloudprovider.ImplementedElsewhere: //nolint:errorlint // upstream's contract
		c.remember(key, svc, nodes, true)
		return nil
	}
	// As upstream: only a failure if the load balancer still exists. The
	// next sync ensures it again (upstream's retry is a full sync too).
	c.markStale(key)
	if _, exists, gerr := c.cfg.LoadBalancer.GetLoadBalancer(ctx, c.cfg.ClusterName, svc); gerr == nil && !exists {
		return nil
	}
	var re *api.RetryError
	if !errors.As(err, &re) {
		c.recorder.Eventf(svc, v1.EventTypeWarning, "UpdateLoadBalancerFailed", "Error updating load balancer with new hosts: %v", err)
	}
	return fmt.Errorf("lbclass: service %s: update load balancer hosts: %w", key, err)
}

// cleanup deletes the load balancer of svc, then (live: svc is the API
// server's, not a remembered copy) clears its status unless another owner
// has it now (see clearStatus) and removes the finalizer.
func (c *Controller) cleanup(ctx context.Context, key string, svc *v1.Service, live bool) error {
	logger := klog.FromContext(ctx)
	_, exists, err := c.cfg.LoadBalancer.GetLoadBalancer(ctx, c.cfg.ClusterName, svc)
	if err != nil {
		return c.syncFailed(svc, fmt.Errorf("check if load balancer exists before cleanup: %w", err))
	}
	if exists {
		logger.V(2).Info("Deleting load balancer", "service", klog.KObj(svc))
		c.recorder.Event(svc, v1.EventTypeNormal, "DeletingLoadBalancer", "Deleting load balancer")
		err := c.cfg.LoadBalancer.EnsureLoadBalancerDeleted(ctx, c.cfg.ClusterName, svc)
		if err != nil && err != cloudprovider.ImplementedElsewhere { //nolint:errorlint // upstream's contract
			return c.syncFailed(svc, fmt.Errorf("delete load balancer: %w", err))
		}
	}
	// The status goes before the finalizer: once that is gone, nothing
	// brings this controller back to the Service.
	if live {
		if err := c.clearStatus(ctx, svc, exists); err != nil {
			return c.syncFailed(svc, err)
		}
	}
	if live {
		if err := c.patchFinalizers(ctx, svc, false); err != nil && !apierrors.IsNotFound(err) {
			return c.syncFailed(svc, fmt.Errorf("remove load balancer cleanup finalizer: %w", err))
		}
	}
	c.recorder.Event(svc, v1.EventTypeNormal, "DeletedLoadBalancer", "Deleted load balancer")
	c.forget(key, svc)
	return nil
}

// syncFailed reports err on svc with upstream's Warning event, except for
// an api.RetryError ("not yet"), and returns it naming the Service.
func (c *Controller) syncFailed(svc *v1.Service, err error) error {
	var re *api.RetryError
	if !errors.As(err, &re) {
		c.recorder.Eventf(svc, v1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing load balancer: %v", err)
	}
	return fmt.Errorf("lbclass: service %s/%s: %w", svc.Namespace, svc.Name, err)
}

// patchFinalizers adds (add) or removes the controller's finalizer with a
// strategic merge patch naming that one entry, so the finalizers others add
// or remove meanwhile stay as they are, even those svc (read from the
// cache, which may be behind the API server) does not show. A patch
// computed from svc would not do: removing the only finalizer svc shows is
// "finalizers": null, which drops every finalizer of the Service, such as
// that of a class it was handed over to since, whose load balancer its
// deletion would then no longer wait for.
func (c *Controller) patchFinalizers(ctx context.Context, svc *v1.Service, add bool) error {
	if hasFinalizer(svc, c.cfg.Finalizer) == add {
		return nil
	}
	// finalizers has the merge strategy: a list given is merged into the
	// API server's, and $deleteFromPrimitiveList removes its entries.
	field := "$deleteFromPrimitiveList/finalizers"
	if add {
		field = "finalizers"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{field: []string{c.cfg.Finalizer}}})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Patching finalizer", "service", klog.KObj(svc), "finalizer", c.cfg.Finalizer, "add", add)
	// Through the status subresource, as servicehelper.PatchService.
	got, err := c.cfg.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	svc.ObjectMeta = got.ObjectMeta
	return nil
}

// patchStatus writes status through the status subresource when it
// differs from previous. A Service gone meanwhile is not an error.
func (c *Controller) patchStatus(_ context.Context, svc *v1.Service, previous, status *v1.LoadBalancerStatus) error {
	if servicehelper.LoadBalancerStatusEqual(previous, status) {
		return nil
	}
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer = *status
	if _, err := servicehelper.PatchService(c.cfg.Client.CoreV1(), svc, updated); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update load balancer status: %w", err)
	}
	return nil
}

// clearStatus clears the load balancer status of svc, cleaned up, unless
// the Service is of type LoadBalancer under another owner (another class, or
// classless while Config.Classless is off): that status is its new owner's.
// A Service still of the class that the load balancer does not serve (see
// Selective) loses its status only if the load balancer held something for
// it (held): else the status, if any, is not this controller's (another load
// balancer's, beside a --classless one). It decides on the Service as the API server has it now, not on svc, read
// from the cache when the sync began: a hand-over while the clean-up's
// router calls ran would otherwise lose the status the new owner wrote
// meanwhile. The write is a JSON patch whose test operations make it apply
// only to the Service as read, so a hand-over between the read and the
// write fails it (an error: the next sync decides again). Neither the type
// nor the class can change without the type test failing (the API server
// clears the class of a Service that leaves type LoadBalancer), and a
// deletion cannot be undone.
func (c *Controller) clearStatus(ctx context.Context, svc *v1.Service, held bool) error {
	cur, err := c.cfg.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read the Service before clearing its load balancer status: %w", err)
	}
	if cur.UID != svc.UID || len(cur.Status.LoadBalancer.Ingress) == 0 || c.ownedElsewhere(cur) || (c.handed(cur) && !held) {
		return nil
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": cur.UID},
		{"op": "test", "path": "/spec/type", "value": cur.Spec.Type},
		{"op": "test", "path": "/status/loadBalancer/ingress", "value": cur.Status.LoadBalancer.Ingress},
		{"op": "remove", "path": "/status/loadBalancer/ingress"},
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Clearing load balancer status", "service", klog.KObj(svc))
	_, err = c.cfg.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("clear load balancer status (the Service may have changed since it was read): %w", err)
	}
	return nil
}

// lookup returns a copy of what was done for key, or nil.
func (c *Controller) lookup(key string) *served {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.served[key]
	if !ok {
		return nil
	}
	cp := *s
	return &cp
}

// remember records svc as served with nodes; current says whether its load
// balancer is up to date with them.
func (c *Controller) remember(key string, svc *v1.Service, nodes []*v1.Node, current bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served[key] = &served{svc: svc.DeepCopy(), nodes: nodes, current: current}
}

// markResync makes the next ensure of key quiet.
func (c *Controller) markResync(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.served[key]; ok {
		s.resync = true
	}
}

// markStale makes the next sync of key ensure again.
func (c *Controller) markStale(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.served[key]; ok {
		s.current = false
	}
}

// forget drops key once svc (the one remembered or a later one) is cleaned
// up; a record of a Service re-created since stays.
func (c *Controller) forget(key string, svc *v1.Service) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.served[key]; ok && s.svc.UID == svc.UID {
		delete(c.served, key)
	}
}

// needsEnsure reports whether cur differs from old, the Service last
// ensured, in what upstream's service controller re-ensures for: ports,
// source ranges, session affinity, loadBalancerIP, external IPs,
// annotations, UID, traffic policy, health check node port, IP families.
func needsEnsure(old, cur *v1.Service) bool {
	o, n := &old.Spec, &cur.Spec
	return old.UID != cur.UID ||
		!reflect.DeepEqual(o.Ports, n.Ports) ||
		!reflect.DeepEqual(o.LoadBalancerSourceRanges, n.LoadBalancerSourceRanges) ||
		o.SessionAffinity != n.SessionAffinity ||
		!reflect.DeepEqual(o.SessionAffinityConfig, n.SessionAffinityConfig) ||
		o.LoadBalancerIP != n.LoadBalancerIP ||
		!slices.Equal(o.ExternalIPs, n.ExternalIPs) ||
		!reflect.DeepEqual(old.Annotations, cur.Annotations) ||
		o.ExternalTrafficPolicy != n.ExternalTrafficPolicy ||
		o.HealthCheckNodePort != n.HealthCheckNodePort ||
		len(o.IPFamilies) != len(n.IPFamilies)
}
