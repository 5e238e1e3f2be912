package main

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// standaloneDeployment is the Deployment of manifests/standalone.
func standaloneDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	for _, o := range decodeManifests(t, standaloneDir) {
		if d, ok := o.(*appsv1.Deployment); ok {
			return d
		}
	}
	t.Fatal("no Deployment in " + standaloneDir)
	return nil
}

// hostPorts is the number of host ports each pod of d binds: with
// hostNetwork every container port is one, and the scheduler puts no two
// pods that bind the same one on a node.
func hostPorts(d *appsv1.Deployment) int {
	n := 0
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if d.Spec.Template.Spec.HostNetwork || p.HostPort != 0 {
				n++
			}
		}
	}
	return n
}

// rollout returns how many pods a rolling update of d adds before removing
// old ones (maxSurge, rounded up) and how many old ones it may remove first
// (maxUnavailable, rounded down), as the deployment controller resolves
// them for replicas; a Recreate strategy removes every pod first.
func rollout(t *testing.T, d *appsv1.Deployment, replicas int) (surge, unavailable int) {
	t.Helper()
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return 0, replicas
	}
	quarter := intstr.FromString("25%") // the API's default for both
	maxSurge, maxUnavailable := &quarter, &quarter
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			maxSurge = ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			maxUnavailable = ru.MaxUnavailable
		}
	}
	var err error
	if surge, err = intstr.GetScaledValueFromIntOrPercent(maxSurge, replicas, true); err != nil {
		t.Fatal(err)
	}
	if unavailable, err = intstr.GetScaledValueFromIntOrPercent(maxUnavailable, replicas, false); err != nil {
		t.Fatal(err)
	}
	return surge, unavailable
}

// The standalone Deployment as shipped runs on a one-node cluster: every
// replica fits on that node, and a rollout (a new image, an edited config)
// can finish there. Scaled to two replicas on two nodes, as its README says,
// the replicas stay on different nodes and a rollout still finishes.
func TestStandaloneRunsOnOneNode(t *testing.T) {
	d := standaloneDeployment(t)
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	ports := hostPorts(d)
	if ports == 0 {
		t.Fatal("the pod declares no host port: two replicas could share a node and both bind --bind-address")
	}
	for _, tc := range []struct {
		name            string
		nodes, replicas int
	}{
		{"as shipped, one node", 1, replicas},
		{"scaled to two, two nodes", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.replicas > tc.nodes {
				t.Fatalf("%d replicas that bind host ports on %d node(s): %d stay Pending", tc.replicas, tc.nodes, tc.replicas-tc.nodes)
			}
			surge, unavailable := rollout(t, d, tc.replicas)
			if tc.replicas+surge > tc.nodes && unavailable == 0 {
				t.Errorf("a rollout adds %d pod(s) to %d on %d node(s) before removing any: the new pod stays Pending and the rollout never ends (want maxSurge 0 and maxUnavailable 1)", surge, tc.replicas, tc.nodes)
			}
		})
	}
}
