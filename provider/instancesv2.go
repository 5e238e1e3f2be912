package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodeutil "k8s.io/component-helpers/node/util"

	"github.com/ccmkit/ccmkit/registry"
)

// ErrForeignProviderID means a node's spec.providerID has the scheme of
// another cloud provider: the node is not one this provider may describe.
var ErrForeignProviderID = errors.New("node's spec.providerID belongs to another cloud provider")

// InstancesV2Config configures NewInstancesV2. The zero value is valid: every
// node gets its ProviderID and keeps its own addresses and labels.
//
// A node's zone, region and instance type are, in order of preference: its
// entry in Nodes; the label the node already carries
// (topology.kubernetes.io/zone or failure-domain.beta.kubernetes.io/zone,
// topology.kubernetes.io/region or failure-domain.beta.kubernetes.io/region,
// node.kubernetes.io/instance-type or beta.kubernetes.io/instance-type),
// which kubelet may set with --node-labels; the defaults below. Empty
// everywhere means none, and no label is written.
type InstancesV2Config struct {
	// Zone is the zone of nodes that have no zone of their own; "" = none.
	Zone string
	// Region is the region of nodes that have no region of their own;
	// "" = none.
	Region string
	// InstanceType is the instance type of nodes that have none of their
	// own; "" = none.
	InstanceType string
	// Nodes holds per-node settings keyed by node name; nil = none.
	Nodes map[string]NodeInstance
	// AdoptSchemes lists ProviderID schemes of other providers whose IDs
	// carry nothing but the node's name, such as "k3s" (k3s's embedded
	// cloud controller gives every node "k3s://<node-name>"). A node whose
	// spec.providerID is exactly SCHEME://<its own name> for one of them is
	// treated as this provider's and keeps that ProviderID (the field is
	// immutable once set). Any other ID of those schemes stays foreign.
	// Each must follow registry.ValidateName and differ from the provider's
	// name; nil = none.
	AdoptSchemes []string
}

// NodeInstance is what InstancesV2Config says about one node.
type NodeInstance struct {
	// Addresses replace the addresses the node reports itself; nil = use the
	// node's own status addresses and the IPs kubelet was given with
	// --node-ip.
	Addresses []v1.NodeAddress
	// Zone of the node; "" = see InstancesV2Config.
	Zone string
	// Region of the node; "" = see InstancesV2Config.
	Region string
	// InstanceType of the node; "" = see InstancesV2Config.
	InstanceType string
}

// InstancesV2 implements cloudprovider.InstancesV2 for clusters without a
// cloud API (bare metal, home labs, edge sites): everything it reports comes
// from the Node object itself and from its configuration. It makes no
// network calls and is safe for concurrent use; it never modifies the nodes
// it is given.
//
// The rules, for a node whose spec.providerID is empty or has this
// provider's scheme ("NAME://"):
//   - InstanceMetadata: ProviderID is the node's own spec.providerID when set,
//     else NAME://<node-name>; addresses, zone, region and instance type as
//     InstancesV2Config describes.
//   - InstanceExists is always true. There is no inventory to consult, and a
//     Node object the API server still serves stands for a machine nobody
//     has removed; reporting it gone would make the cloud node lifecycle
//     controller delete it. Removing a decommissioned node is the
//     administrator's job (kubectl delete node).
//   - InstanceShutdown is always false: there is no power-state API. A
//     machine that is off shows up as NotReady through kubelet.
//
// A node whose spec.providerID is SCHEME://<node-name> for a scheme of
// InstancesV2Config.AdoptSchemes follows the same rules and keeps its
// ProviderID.
//
// A node whose spec.providerID has another scheme belongs to another cloud
// provider: every method returns an error matching ErrForeignProviderID. The
// cloud node controllers log such an error and leave the node alone, so it is
// neither initialized nor reported gone (and so never deleted).
type InstancesV2 struct {
	providerName string
	cfg          InstancesV2Config
}

var _ cloudprovider.InstancesV2 = (*InstancesV2)(nil)

// NewInstancesV2 returns an InstancesV2 for the provider named providerName,
// which must follow registry.ValidateName since it becomes the scheme of
// every ProviderID. cfg is copied. Invalid configuration gives an error
// naming the field.
func NewInstancesV2(providerName string, cfg InstancesV2Config) (*InstancesV2, error) {
	if err := registry.ValidateName(providerName); err != nil {
		return nil, fmt.Errorf("new instances: %w", err)
	}
	if err := cfg.validate(providerName); err != nil {
		return nil, fmt.Errorf("new instances for %q: %w", providerName, err)
	}
	cp := cfg
	cp.AdoptSchemes = slices.Clone(cfg.AdoptSchemes)
	cp.Nodes = make(map[string]NodeInstance, len(cfg.Nodes))
	for name, n := range cfg.Nodes {
		n.Addresses = slices.Clone(n.Addresses)
		cp.Nodes[name] = n
	}
	return &InstancesV2{providerName: providerName, cfg: cp}, nil
}

func (c InstancesV2Config) validate(providerName string) error {
	var errs []error
	for i, scheme := range c.AdoptSchemes {
		field := fmt.Sprintf("InstancesV2Config.AdoptSchemes[%d]", i)
		if err := registry.ValidateName(scheme); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		} else if scheme == providerName {
			errs = append(errs, fmt.Errorf("%s %q is the provider's own scheme", field, scheme))
		}
	}
	label := func(field, v string) {
		if v == "" {
			return
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("InstancesV2Config.%s %q is not a valid label value: %s", field, v, strings.Join(msgs, "; ")))
		}
	}
	label("Zone", c.Zone)
	label("Region", c.Region)
	label("InstanceType", c.InstanceType)
	for _, name := range slices.Sorted(maps.Keys(c.Nodes)) {
		n := c.Nodes[name]
		base := fmt.Sprintf("Nodes[%q]", name)
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("InstancesV2Config.%s: %q is not a node name: %s", base, name, strings.Join(msgs, "; ")))
		}
		label(base+".Zone", n.Zone)
		label(base+".Region", n.Region)
		label(base+".InstanceType", n.InstanceType)
		for i, a := range n.Addresses {
			field := fmt.Sprintf("InstancesV2Config.%s.Addresses[%d]", base, i)
			switch a.Type {
			case v1.NodeInternalIP, v1.NodeExternalIP:
				if _, err := netip.ParseAddr(a.Address); err != nil {
					errs = append(errs, fmt.Errorf("%s.Address %q is not an IP address (type %s)", field, a.Address, a.Type))
				}
			case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
				if msgs := validation.IsDNS1123Subdomain(a.Address); len(msgs) > 0 {
					errs = append(errs, fmt.Errorf("%s.Address %q is not a DNS name (type %s): %s", field, a.Address, a.Type, strings.Join(msgs, "; ")))
				}
			default:
				errs = append(errs, fmt.Errorf("%s.Type %q is not a node address type", field, a.Type))
			}
		}
	}
	return errors.Join(errs...)
}

// ProviderID returns the ProviderID this provider gives a node named
// nodeName that has none: "NAME://<node-name>".
func (i *InstancesV2) ProviderID(nodeName string) string {
	return i.providerName + "://" + nodeName
}

// check rejects a nil node and one whose ProviderID belongs to another
// provider.
func (i *InstancesV2) check(op string, node *v1.Node) error {
	if node == nil {
		return fmt.Errorf("%s: node is nil", op)
	}
	id := node.Spec.ProviderID
	if id == "" || strings.HasPrefix(id, i.providerName+"://") {
		return nil
	}
	for _, scheme := range i.cfg.AdoptSchemes {
		if id == scheme+"://"+node.Name {
			return nil
		}
	}
	return fmt.Errorf("%s: node %q: spec.providerID %q: %w (this provider's ProviderIDs start with %q)",
		op, node.Name, id, ErrForeignProviderID, i.providerName+"://")
}

// InstanceExists reports true for every node of this provider; see
// InstancesV2 for the rule.
func (i *InstancesV2) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	if err := i.check("instance exists", node); err != nil {
		return false, err
	}
	return true, nil
}

// InstanceShutdown reports false for every node of this provider; see
// InstancesV2 for the rule.
func (i *InstancesV2) InstanceShutdown(_ context.Context, node *v1.Node) (bool, error) {
	if err := i.check("instance shutdown", node); err != nil {
		return false, err
	}
	return false, nil
}

// InstanceMetadata returns the node's ProviderID, addresses, zone, region
// and instance type; see InstancesV2 and InstancesV2Config for the rules. A
// malformed alpha.kubernetes.io/provided-node-ip annotation is an error
// naming the node, since the cloud node controller would refuse it too.
func (i *InstancesV2) InstanceMetadata(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := i.check("instance metadata", node); err != nil {
		return nil, err
	}
	own := i.cfg.Nodes[node.Name]
	addrs, err := i.addresses(node, own)
	if err != nil {
		return nil, err
	}
	providerID := node.Spec.ProviderID
	if providerID == "" {
		providerID = i.ProviderID(node.Name)
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:    providerID,
		NodeAddresses: addrs,
		InstanceType:  first(own.InstanceType, node.Labels[v1.LabelInstanceTypeStable], node.Labels[v1.LabelInstanceType], i.cfg.InstanceType),
		Zone:          first(own.Zone, node.Labels[v1.LabelTopologyZone], node.Labels[v1.LabelFailureDomainBetaZone], i.cfg.Zone),
		Region:        first(own.Region, node.Labels[v1.LabelTopologyRegion], node.Labels[v1.LabelFailureDomainBetaRegion], i.cfg.Region),
	}, nil
}

// addresses returns the configured addresses of node, or else its own status
// addresses followed by an InternalIP for each IP of the provided-node-ip
// annotation (kubelet's --node-ip) that is not among them. The cloud node
// controller refuses to initialize a node whose --node-ip is not among the
// addresses the provider returns, so that address must be there.
func (i *InstancesV2) addresses(node *v1.Node, own NodeInstance) ([]v1.NodeAddress, error) {
	if len(own.Addresses) > 0 {
		return slices.Clone(own.Addresses), nil
	}
	addrs := slices.Clone(node.Status.Addresses)
	provided, ok := node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]
	if !ok {
		return addrs, nil
	}
	ips, err := nodeutil.ParseNodeIPAnnotation(provided)
	if err != nil {
		return nil, fmt.Errorf("instance metadata: node %q: annotation %s=%q: %w", node.Name, cloudproviderapi.AnnotationAlphaProvidedIPAddr, provided, err)
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(addrs, func(a v1.NodeAddress) bool { return sameIP(a.Address, ip.String()) }) {
			addrs = append(addrs, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
		}
	}
	return addrs, nil
}

// sameIP reports whether a and b are the same IP address (non-IPs never are).
func sameIP(a, b string) bool {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	return errX == nil && errY == nil && x.Unmap() == y.Unmap()
}

// first returns the first non-empty string of vs.
func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
