package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	"k8s.io/cloud-provider/controllers/nodelifecycle"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"

	"github.com/ccmkit/ccmkit/registry"
	"github.com/google/go-cmp/cmp"
)

// testNode is a node named name with the given spec.providerID, labels,
// annotations and status addresses.
func testNode(name, providerID string, labels, annotations map[string]string, addrs ...v1.NodeAddress) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       v1.NodeSpec{ProviderID: providerID},
		Status:     v1.NodeStatus{Addresses: addrs},
	}
}

func internalIP(ip string) v1.NodeAddress {
	return v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip}
}
func hostname(h string) v1.NodeAddress { return v1.NodeAddress{Type: v1.NodeHostName, Address: h} }

func newTestInstances(t *testing.T, cfg InstancesV2Config) *InstancesV2 {
	t.Helper()
	i, err := NewInstancesV2("edge", cfg)
	if err != nil {
		t.Fatalf("NewInstancesV2: %v", err)
	}
	return i
}

func TestInstanceMetadata(t *testing.T) {
	cfg := InstancesV2Config{
		Zone: "default-zone", Region: "default-region", InstanceType: "default-type",
		Nodes: map[string]NodeInstance{
			"configured": {
				Addresses:    []v1.NodeAddress{internalIP("10.0.0.5"), {Type: v1.NodeExternalIP, Address: "203.0.113.5"}},
				Zone:         "node-zone",
				Region:       "node-region",
				InstanceType: "node-type",
			},
			"labels-only": {Zone: "node-zone"},
		},
	}
	tests := []struct {
		name string
		node *v1.Node
		want cloudprovider.InstanceMetadata
	}{
		{
			name: "bare node gets name-based ProviderID, own addresses and defaults",
			node: testNode("n1", "", nil, nil, internalIP("192.168.1.10"), hostname("n1")),
			want: cloudprovider.InstanceMetadata{
				ProviderID:    "edge://n1",
				NodeAddresses: []v1.NodeAddress{internalIP("192.168.1.10"), hostname("n1")},
				Zone:          "default-zone", Region: "default-region", InstanceType: "default-type",
			},
		},
		{
			name: "ProviderID set by kubelet with our scheme is kept",
			node: testNode("n1", "edge://machine-7", nil, nil),
			want: cloudprovider.InstanceMetadata{
				ProviderID: "edge://machine-7",
				Zone:       "default-zone", Region: "default-region", InstanceType: "default-type",
			},
		},
		{
			name: "node labels beat defaults",
			node: testNode("n1", "", map[string]string{
				v1.LabelTopologyZone:       "label-zone",
				v1.LabelTopologyRegion:     "label-region",
				v1.LabelInstanceTypeStable: "label-type",
			}, nil),
			want: cloudprovider.InstanceMetadata{
				ProviderID: "edge://n1",
				Zone:       "label-zone", Region: "label-region", InstanceType: "label-type",
			},
		},
		{
			name: "deprecated beta labels are read too",
			node: testNode("n1", "", map[string]string{
				v1.LabelFailureDomainBetaZone:   "beta-zone",
				v1.LabelFailureDomainBetaRegion: "beta-region",
				v1.LabelInstanceType:            "beta-type",
			}, nil),
			want: cloudprovider.InstanceMetadata{
				ProviderID: "edge://n1",
				Zone:       "beta-zone", Region: "beta-region", InstanceType: "beta-type",
			},
		},
		{
			name: "per-node configuration beats labels and replaces addresses",
			node: testNode("configured", "", map[string]string{
				v1.LabelTopologyZone: "label-zone", v1.LabelTopologyRegion: "label-region",
			}, nil, internalIP("192.168.1.99")),
			want: cloudprovider.InstanceMetadata{
				ProviderID:    "edge://configured",
				NodeAddresses: []v1.NodeAddress{internalIP("10.0.0.5"), {Type: v1.NodeExternalIP, Address: "203.0.113.5"}},
				Zone:          "node-zone", Region: "node-region", InstanceType: "node-type",
			},
		},
		{
			name: "per-node zone only: the rest from labels and defaults",
			node: testNode("labels-only", "", map[string]string{v1.LabelTopologyRegion: "label-region"}, nil, internalIP("192.168.1.11")),
			want: cloudprovider.InstanceMetadata{
				ProviderID:    "edge://labels-only",
				NodeAddresses: []v1.NodeAddress{internalIP("192.168.1.11")},
				Zone:          "node-zone", Region: "label-region", InstanceType: "default-type",
			},
		},
		{
			name: "kubelet --node-ip without status addresses becomes an InternalIP",
			node: testNode("n1", "", nil, map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "192.168.1.20"}),
			want: cloudprovider.InstanceMetadata{
				ProviderID:    "edge://n1",
				NodeAddresses: []v1.NodeAddress{internalIP("192.168.1.20")},
				Zone:          "default-zone", Region: "default-region", InstanceType: "default-type",
			},
		},
		{
			name: "dual-stack --node-ip, one already reported",
			node: testNode("n1", "", nil, map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "192.168.1.20,fd00::20"},
				internalIP("192.168.1.20"), hostname("n1")),
			want: cloudprovider.InstanceMetadata{
				ProviderID:    "edge://n1",
				NodeAddresses: []v1.NodeAddress{internalIP("192.168.1.20"), hostname("n1"), internalIP("fd00::20")},
				Zone:          "default-zone", Region: "default-region", InstanceType: "default-type",
			},
		},
	}
	inst := newTestInstances(t, cfg)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.node.DeepCopy()
			got, err := inst.InstanceMetadata(context.Background(), tt.node)
			if err != nil {
				t.Fatalf("InstanceMetadata: %v", err)
			}
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("InstanceMetadata (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.node); diff != "" {
				t.Errorf("InstanceMetadata modified its argument (-before +after):\n%s", diff)
			}
		})
	}
}

func TestInstanceMetadataNoConfig(t *testing.T) {
	inst := newTestInstances(t, InstancesV2Config{})
	got, err := inst.InstanceMetadata(context.Background(), testNode("n1", "", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := cloudprovider.InstanceMetadata{ProviderID: "edge://n1"}
	if diff := cmp.Diff(want, *got); diff != "" {
		t.Errorf("InstanceMetadata with zero config invents labels (-want +got):\n%s", diff)
	}
}

func TestInstanceMetadataBadNodeIPAnnotation(t *testing.T) {
	inst := newTestInstances(t, InstancesV2Config{})
	node := testNode("n1", "", nil, map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "not-an-ip"})
	_, err := inst.InstanceMetadata(context.Background(), node)
	if err == nil || !strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), cloudproviderapi.AnnotationAlphaProvidedIPAddr) {
		t.Fatalf("InstanceMetadata = %v, want an error naming the node and the annotation", err)
	}
}

// TestInstanceExistsAndShutdown states the lifecycle rules: a node object of
// ours is never reported gone or shut down; a foreign node is an error, never
// "gone".
func TestInstanceExistsAndShutdown(t *testing.T) {
	tests := []struct {
		name         string
		node         *v1.Node
		wantExists   bool
		wantShutdown bool
		wantErr      error // nil = no error
	}{
		{name: "no ProviderID yet", node: testNode("n1", "", nil, nil), wantExists: true},
		{name: "our ProviderID", node: testNode("n1", "edge://n1", nil, nil), wantExists: true},
		{name: "our scheme, other instance id", node: testNode("n1", "edge://machine-7", nil, nil), wantExists: true},
		{name: "NotReady node still exists", node: func() *v1.Node {
			n := testNode("n1", "edge://n1", nil, nil)
			n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}
			return n
		}(), wantExists: true},
		{name: "foreign scheme", node: testNode("n1", "aws:///eu-west-1a/i-0123", nil, nil), wantErr: ErrForeignProviderID},
		{name: "scheme prefix is not enough", node: testNode("n1", "edgey://n1", nil, nil), wantErr: ErrForeignProviderID},
		{name: "no scheme separator", node: testNode("n1", "edge:n1", nil, nil), wantErr: ErrForeignProviderID},
		// AdoptSchemes is {"k3s"} below.
		{name: "adopted scheme, the node's name", node: testNode("n1", "k3s://n1", nil, nil), wantExists: true},
		{name: "adopted scheme, another name", node: testNode("n1", "k3s://n2", nil, nil), wantErr: ErrForeignProviderID},
		{name: "adopted scheme, more than the name", node: testNode("n1", "k3s://n1/x", nil, nil), wantErr: ErrForeignProviderID},
		{name: "adopted scheme, no separator", node: testNode("n1", "k3s:n1", nil, nil), wantErr: ErrForeignProviderID},
		{name: "scheme not adopted", node: testNode("n1", "rke2://n1", nil, nil), wantErr: ErrForeignProviderID},
	}
	inst := newTestInstances(t, InstancesV2Config{AdoptSchemes: []string{"k3s"}})
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exists, err := inst.InstanceExists(ctx, tt.node)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("InstanceExists error = %v, want %v", err, tt.wantErr)
			}
			if exists != tt.wantExists {
				t.Errorf("InstanceExists = %v, want %v", exists, tt.wantExists)
			}
			shutdown, err := inst.InstanceShutdown(ctx, tt.node)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("InstanceShutdown error = %v, want %v", err, tt.wantErr)
			}
			if shutdown != tt.wantShutdown {
				t.Errorf("InstanceShutdown = %v, want %v", shutdown, tt.wantShutdown)
			}
			md, err := inst.InstanceMetadata(ctx, tt.node)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("InstanceMetadata error = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				if md != nil {
					t.Errorf("InstanceMetadata returned %+v with an error", md)
				}
				if !strings.Contains(err.Error(), tt.node.Spec.ProviderID) || !strings.Contains(err.Error(), `"n1"`) {
					t.Errorf("error %q does not name the node and its ProviderID", err)
				}
			}
		})
	}
}

// TestInstanceMetadataAdoptedScheme: a k3s node keeps its ProviderID and gets
// its metadata from the configuration and its labels like any other node.
func TestInstanceMetadataAdoptedScheme(t *testing.T) {
	inst := newTestInstances(t, InstancesV2Config{
		Region:       "home",
		AdoptSchemes: []string{"k3s"},
		Nodes:        map[string]NodeInstance{"pi": {Zone: "shelf"}},
	})
	node := testNode("pi", "k3s://pi", map[string]string{v1.LabelInstanceTypeStable: "rpi5"}, nil, internalIP("192.168.1.20"))
	md, err := inst.InstanceMetadata(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	want := &cloudprovider.InstanceMetadata{
		ProviderID:    "k3s://pi",
		NodeAddresses: []v1.NodeAddress{internalIP("192.168.1.20")},
		InstanceType:  "rpi5",
		Zone:          "shelf",
		Region:        "home",
	}
	if diff := cmp.Diff(want, md); diff != "" {
		t.Errorf("InstanceMetadata (-want +got):\n%s", diff)
	}
}

func TestInstancesNilNode(t *testing.T) {
	inst := newTestInstances(t, InstancesV2Config{})
	ctx := context.Background()
	if _, err := inst.InstanceExists(ctx, nil); err == nil {
		t.Error("InstanceExists(nil) succeeded")
	}
	if _, err := inst.InstanceShutdown(ctx, nil); err == nil {
		t.Error("InstanceShutdown(nil) succeeded")
	}
	if _, err := inst.InstanceMetadata(ctx, nil); err == nil {
		t.Error("InstanceMetadata(nil) succeeded")
	}
}

func TestNewInstancesV2Invalid(t *testing.T) {
	tests := []struct {
		name     string
		provider string
		cfg      InstancesV2Config
		contains string
		is       error
	}{
		{name: "empty provider name", provider: "", is: registry.ErrInvalidName},
		{name: "provider name with scheme characters", provider: "Edge:", is: registry.ErrInvalidName},
		{name: "zone", provider: "edge", cfg: InstancesV2Config{Zone: "a zone"}, contains: "InstancesV2Config.Zone"},
		{name: "node name", provider: "edge", cfg: InstancesV2Config{Nodes: map[string]NodeInstance{"N_1": {}}}, contains: `InstancesV2Config.Nodes["N_1"]`},
		{name: "node instance type", provider: "edge", cfg: InstancesV2Config{Nodes: map[string]NodeInstance{"n1": {InstanceType: "x/y"}}}, contains: `Nodes["n1"].InstanceType`},
		{name: "address type", provider: "edge", cfg: InstancesV2Config{Nodes: map[string]NodeInstance{"n1": {Addresses: []v1.NodeAddress{{Type: "IP", Address: "10.0.0.1"}}}}}, contains: `Nodes["n1"].Addresses[0].Type`},
		{name: "adopted scheme", provider: "edge", cfg: InstancesV2Config{AdoptSchemes: []string{"k3s://"}}, contains: "InstancesV2Config.AdoptSchemes[0]", is: registry.ErrInvalidName},
		{name: "adopted scheme is the provider's", provider: "edge", cfg: InstancesV2Config{AdoptSchemes: []string{"k3s", "edge"}}, contains: "InstancesV2Config.AdoptSchemes[1]"},
		{name: "address IP", provider: "edge", cfg: InstancesV2Config{Nodes: map[string]NodeInstance{"n1": {Addresses: []v1.NodeAddress{internalIP("10.0.0.300")}}}}, contains: `Nodes["n1"].Addresses[0].Address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NewInstancesV2(tt.provider, tt.cfg)
			if err == nil {
				t.Fatalf("NewInstancesV2 = %+v, want an error", got)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not match %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not contain %q", err, tt.contains)
			}
		})
	}
}

func TestNewInstancesV2CopiesConfig(t *testing.T) {
	cfg := InstancesV2Config{Nodes: map[string]NodeInstance{"n1": {Addresses: []v1.NodeAddress{internalIP("10.0.0.1")}}}}
	inst := newTestInstances(t, cfg)
	cfg.Nodes["n1"].Addresses[0].Address = "10.9.9.9"
	cfg.Nodes["n2"] = NodeInstance{Zone: "z"}
	md, err := inst.InstanceMetadata(context.Background(), testNode("n1", "", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := md.NodeAddresses; len(got) != 1 || got[0].Address != "10.0.0.1" {
		t.Errorf("addresses = %v after the caller changed its config, want [10.0.0.1]", got)
	}
	md.NodeAddresses[0].Address = "10.8.8.8"
	md2, _ := inst.InstanceMetadata(context.Background(), testNode("n1", "", nil, nil))
	if md2.NodeAddresses[0].Address != "10.0.0.1" {
		t.Errorf("changing a returned address changed the configuration: %v", md2.NodeAddresses)
	}
}

// TestCloudNodeControllerInitializesNodes runs the upstream cloud node
// controller on a fake clientset against InstancesV2: tainted nodes get
// their ProviderID, addresses and labels, and lose the taint.
func TestCloudNodeControllerInitializesNodes(t *testing.T) {
	uninitialized := v1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule}
	other := v1.Taint{Key: "example.com/keep", Value: "x", Effect: v1.TaintEffectNoSchedule}
	tainted := func(n *v1.Node, extra ...v1.Taint) *v1.Node {
		n.Spec.Taints = append([]v1.Taint{uninitialized}, extra...)
		n.CreationTimestamp = metav1.Now()
		return n
	}
	nodes := []*v1.Node{
		// As kubelet --cloud-provider=external --node-ip=192.168.1.10 registers it.
		tainted(testNode("pi-1", "", nil, map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "192.168.1.10"},
			internalIP("192.168.1.10"), hostname("pi-1")), other),
		// Addresses and zone from configuration, region from its own label.
		tainted(testNode("nuc", "", map[string]string{v1.LabelTopologyRegion: "attic"}, nil, hostname("nuc"))),
		// A k3s node, whose ProviderID k3s's embedded controller set.
		tainted(testNode("k3s-1", "k3s://k3s-1", nil, nil, internalIP("192.168.1.30"), hostname("k3s-1"))),
	}
	inst := newTestInstances(t, InstancesV2Config{
		Zone: "home", InstanceType: "sbc", AdoptSchemes: []string{"k3s"},
		Nodes: map[string]NodeInstance{"nuc": {
			Addresses: []v1.NodeAddress{internalIP("192.168.1.20"), {Type: v1.NodeExternalIP, Address: "203.0.113.20"}},
			Zone:      "shelf", InstanceType: "nuc11",
		}},
	})
	client := fake.NewClientset(nodes[0], nodes[1], nodes[2])
	factory := informers.NewSharedInformerFactory(client, 0)
	cloud, err := New("edge", Config{InstancesV2: inst})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	cnc, err := nodecontroller.NewCloudNodeController(factory.Core().V1().Nodes(), client, cloud, time.Hour, 1, 1)
	if err != nil {
		t.Fatalf("NewCloudNodeController: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		cnc.RunWithContext(ctx, controllersmetrics.NewControllerManagerMetrics("test"))
	}()
	factory.Start(ctx.Done())

	want := map[string]struct {
		providerID string
		addresses  []v1.NodeAddress
		labels     map[string]string
		taints     []v1.Taint
	}{
		"pi-1": {
			providerID: "edge://pi-1",
			addresses:  []v1.NodeAddress{internalIP("192.168.1.10"), hostname("pi-1")},
			labels: map[string]string{
				v1.LabelTopologyZone: "home", v1.LabelFailureDomainBetaZone: "home",
				v1.LabelInstanceTypeStable: "sbc", v1.LabelInstanceType: "sbc",
			},
			taints: []v1.Taint{other},
		},
		"nuc": {
			providerID: "edge://nuc",
			addresses:  []v1.NodeAddress{internalIP("192.168.1.20"), {Type: v1.NodeExternalIP, Address: "203.0.113.20"}, hostname("nuc")},
			labels: map[string]string{
				v1.LabelTopologyZone: "shelf", v1.LabelFailureDomainBetaZone: "shelf",
				v1.LabelTopologyRegion: "attic", v1.LabelFailureDomainBetaRegion: "attic",
				v1.LabelInstanceTypeStable: "nuc11", v1.LabelInstanceType: "nuc11",
			},
		},
		"k3s-1": {
			providerID: "k3s://k3s-1",
			addresses:  []v1.NodeAddress{internalIP("192.168.1.30"), hostname("k3s-1")},
			labels: map[string]string{
				v1.LabelTopologyZone: "home", v1.LabelFailureDomainBetaZone: "home",
				v1.LabelInstanceTypeStable: "sbc", v1.LabelInstanceType: "sbc",
			},
		},
	}
	for name, w := range want {
		var node *v1.Node
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			node = n
			return n.Spec.ProviderID != "" && !hasTaint(n, cloudproviderapi.TaintExternalCloudProvider) && len(n.Status.Addresses) == len(w.addresses), nil
		})
		if err != nil {
			t.Fatalf("node %s was not initialized: %v (last seen: providerID=%q taints=%v addresses=%v)", name, err, node.Spec.ProviderID, node.Spec.Taints, node.Status.Addresses)
		}
		if node.Spec.ProviderID != w.providerID {
			t.Errorf("node %s: ProviderID = %q, want %q", name, node.Spec.ProviderID, w.providerID)
		}
		if !sameAddresses(node.Status.Addresses, w.addresses) {
			t.Errorf("node %s: addresses = %v, want %v", name, node.Status.Addresses, w.addresses)
		}
		for k, v := range w.labels {
			if node.Labels[k] != v {
				t.Errorf("node %s: label %s = %q, want %q", name, k, node.Labels[k], v)
			}
		}
		if len(node.Spec.Taints) != len(w.taints) || (len(w.taints) > 0 && node.Spec.Taints[0].Key != w.taints[0].Key) {
			t.Errorf("node %s: taints = %v, want %v", name, node.Spec.Taints, w.taints)
		}
	}
}

// TestCloudNodeLifecycleControllerKeepsNodes runs the upstream cloud node
// lifecycle controller's first pass over NotReady nodes (the only ones it
// asks the provider about): a node object that still exists is never
// reported gone, so none is deleted, and none is tainted as shut down. That
// holds for our nodes, for a node not yet initialized, and for a node of
// another provider (an error, which the controller logs and skips).
func TestCloudNodeLifecycleControllerKeepsNodes(t *testing.T) {
	notReady := func(n *v1.Node) *v1.Node {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}
		return n
	}
	nodes := []*v1.Node{
		notReady(testNode("powered-off", "edge://powered-off", nil, nil, internalIP("192.168.1.10"))),
		notReady(testNode("not-initialized", "", nil, nil)),
		notReady(testNode("foreign", "aws:///eu-west-1a/i-0123", nil, nil)),
		notReady(testNode("k3s-node", "k3s://k3s-node", nil, nil)),
		notReady(testNode("k3s-other", "k3s://k3s-renamed", nil, nil)),
	}
	client := fake.NewClientset(nodes[0], nodes[1], nodes[2], nodes[3], nodes[4])
	factory := informers.NewSharedInformerFactory(client, 0)
	asked := &askedInstances{InstancesV2: newTestInstances(t, InstancesV2Config{AdoptSchemes: []string{"k3s"}}), calls: make(chan string, 16)}
	cloud, err := New("edge", Config{InstancesV2: asked})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lifecycle, err := nodelifecycle.NewCloudNodeLifecycleController(factory.Core().V1().Nodes(), client, cloud, time.Hour, 1)
	if err != nil {
		t.Fatalf("NewCloudNodeLifecycleController: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	// Run passes over the nodes at once, then every hour. Wait until it
	// has asked about every node (and whether each of ours is shut down,
	// which it asks only of nodes that exist), then stop it: Run returns
	// once the pass is complete, its effects applied.
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		lifecycle.Run(ctx, controllersmetrics.NewControllerManagerMetrics("test"))
	}()
	want := map[string]bool{
		"exists powered-off": true, "exists not-initialized": true, "exists foreign": true,
		"exists k3s-node": true, "exists k3s-other": true,
		"shutdown powered-off": true, "shutdown not-initialized": true, "shutdown k3s-node": true,
	}
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case c := <-asked.calls:
			delete(want, c)
		case <-timeout:
			t.Fatalf("the lifecycle controller did not ask %v within 30s", want)
		}
	}
	cancel()
	<-ran

	for _, a := range client.Actions() {
		if a.GetResource().Resource == "nodes" && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("the lifecycle controller changed a node: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	for _, n := range nodes {
		got, err := client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("node %s after a lifecycle pass: %v (it must never be deleted)", n.Name, err)
			continue
		}
		if hasTaint(got, cloudproviderapi.TaintNodeShutdown) {
			t.Errorf("node %s was tainted %s", got.Name, cloudproviderapi.TaintNodeShutdown)
		}
	}
}

// askedInstances passes calls to InstancesV2 on and reports each
// InstanceExists and InstanceShutdown call ("exists NODE", "shutdown NODE")
// on calls.
type askedInstances struct {
	cloudprovider.InstancesV2
	calls chan string
}

func (a *askedInstances) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	defer func() { a.calls <- "exists " + node.Name }()
	return a.InstancesV2.InstanceExists(ctx, node)
}

func (a *askedInstances) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	defer func() { a.calls <- "shutdown " + node.Name }()
	return a.InstancesV2.InstanceShutdown(ctx, node)
}

func hasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// sameAddresses compares address lists ignoring order.
func sameAddresses(a, b []v1.NodeAddress) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[v1.NodeAddress]int{}
	for _, x := range a {
		count[x]++
	}
	for _, x := range b {
		count[x]--
	}
	for _, c := range count {
		if c != 0 {
			return false
		}
	}
	return true
}

// InstancesV2 for a cluster without a cloud API: the ProviderID comes from
// the node's name, the zone from configuration.
func ExampleNewInstancesV2() {
	instances, err := NewInstancesV2("homelab", InstancesV2Config{Zone: "attic"})
	if err != nil {
		fmt.Println(err)
		return
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "pi-1"},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.1.10"}}},
	}
	md, err := instances.InstanceMetadata(context.Background(), node)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(md.ProviderID, md.Zone, md.NodeAddresses[0].Address)
	// Output: homelab://pi-1 attic 192.168.1.10
}
