package cluster

import (
	"context"
	"fmt"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/provider/lbclass"
)

// Class is a load balancer class controller (package provider/lbclass) the
// harness runs beside upstream's controllers.
type Class struct {
	// Name is the spec.loadBalancerClass served. Required.
	Name string
	// LoadBalancer serves the class. Required. The harness calls none of
	// its life-cycle methods (Initialize, Run): they are the caller's.
	LoadBalancer cloudprovider.LoadBalancer
	// Classless also serves Services with no class, as lbclass.Config.
	Classless bool
}

// startClasses starts a class controller per cfg.Classes on the harness's
// informers, its load balancer calls behind the gate, and waits for the
// caches.
func (h *Harness) startClasses(ctx, runCtx context.Context) error {
	if len(h.cfg.Classes) == 0 {
		return nil
	}
	for i, cl := range h.cfg.Classes {
		if cl.LoadBalancer == nil {
			return fmt.Errorf("cluster: Config.Classes[%d].LoadBalancer is nil", i)
		}
		c, err := lbclass.New(lbclass.Config{
			Class:        cl.Name,
			Classless:    cl.Classless,
			LoadBalancer: gatedLoadBalancer{cl.LoadBalancer, &h.gate},
			Client:       h.Client,
			Informers:    h.factory,
			ClusterName:  h.cfg.ClusterName,
		})
		if err != nil {
			return fmt.Errorf("cluster: Config.Classes[%d]: %w", i, err)
		}
		h.wg.Go(func() { _ = c.Run(runCtx) }) // its only error: ctx ended before the caches synced
	}
	h.factory.Start(runCtx.Done())
	return h.waitForCaches(ctx)
}
