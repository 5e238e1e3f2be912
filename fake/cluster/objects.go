package cluster

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// NodeOption changes a Node built by Node.
type NodeOption func(*v1.Node)

// Node returns a Node as kubelet --cloud-provider=external registers it:
// Ready, tainted with node.cloudprovider.kubernetes.io/uninitialized, no
// ProviderID, changed by opts in order, and then given its name as its
// Hostname address after the addresses opts added (kubelet lists its
// InternalIP first).
func Node(name string, opts ...NodeOption) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-node-" + name), CreationTimestamp: metav1.Now()},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{
			Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule,
		}}},
		Status: v1.NodeStatus{
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: name})
	return n
}

// Initialized removes the uninitialized taint: the node as the cloud node
// controller leaves it.
func Initialized() NodeOption {
	return func(n *v1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool {
			return t.Key == cloudproviderapi.TaintExternalCloudProvider
		})
	}
}

// NotReady sets the node's Ready condition to False.
func NotReady() NodeOption {
	return func(n *v1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == v1.NodeReady {
				n.Status.Conditions[i].Status = v1.ConditionFalse
			}
		}
	}
}

// InternalIP adds an InternalIP address.
func InternalIP(ip string) NodeOption { return Address(v1.NodeInternalIP, ip) }

// Address adds an address of type typ.
func Address(typ v1.NodeAddressType, address string) NodeOption {
	return func(n *v1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: typ, Address: address})
	}
}

// PodCIDRs sets spec.podCIDRs, and spec.podCIDR to the first, as the node
// IPAM controller assigns them: the route controller routes each to the
// node.
func PodCIDRs(cidrs ...string) NodeOption {
	return func(n *v1.Node) {
		n.Spec.PodCIDRs = cidrs
		n.Spec.PodCIDR = ""
		if len(cidrs) > 0 {
			n.Spec.PodCIDR = cidrs[0]
		}
	}
}

// ProviderID sets spec.providerID.
func ProviderID(id string) NodeOption { return func(n *v1.Node) { n.Spec.ProviderID = id } }

// NodeLabel sets a label.
func NodeLabel(key, value string) NodeOption {
	return func(n *v1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[key] = value
	}
}

// ServiceOption changes a Service built by Service.
type ServiceOption func(*v1.Service)

// Service returns a Service of type LoadBalancer, IPv4 single-stack, with
// a cluster IP, external traffic policy Cluster and no ports, then changed by
// opts in order. Its UID is derived from its name, so that it has one in a
// bare fake clientset too, which sets none (a Harness does).
func Service(namespace, name string, opts ...ServiceOption) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-svc-" + namespace + "-" + name), CreationTimestamp: metav1.Now()},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeLoadBalancer,
			Selector:              map[string]string{"app": name},
			ClusterIP:             "10.96.0.10",
			ClusterIPs:            []string{"10.96.0.10"},
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Port adds a port forwarding port to nodePort; the target port is port.
func Port(name string, proto v1.Protocol, port, nodePort int32) ServiceOption {
	return func(s *v1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{
			Name: name, Protocol: proto, Port: port, TargetPort: intstr.FromInt32(port), NodePort: nodePort,
		})
	}
}

// Annotation sets an annotation.
func Annotation(key, value string) ServiceOption {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[key] = value
	}
}
