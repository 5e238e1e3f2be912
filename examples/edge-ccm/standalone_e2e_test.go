package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// e2eKubeconfigEnv names the kubeconfig of a real, disposable API server
// for TestStandaloneE2E (etcd and kube-apiserver on loopback, no kubelet,
// no controllers, such as the project's kube-up.sh starts):
//
//	eval $(kube-up.sh env); EDGE_E2E_KUBECONFIG=$KUBECONFIG go test -run TestStandaloneE2E ./examples/edge-ccm/
const e2eKubeconfigEnv = "EDGE_E2E_KUBECONFIG"

// e2eBound bounds each wait of the end-to-end test: a failure to converge,
// not a speed check.
const e2eBound = 2 * time.Minute

// TestStandaloneE2E runs the standalone mode against a real kube-apiserver
// as the manifests' service account, with only the manifests' RBAC, over
// the real-router lab: a node registered as a kubelet without
// --cloud-provider=external registers it (InternalIP, Ready, no ProviderID,
// no taint), a Service of the class gets the router's address and a
// mapping to the node's nodePort, and deleting it leaves nothing.
func TestStandaloneE2E(t *testing.T) {
	kubeconfig := os.Getenv(e2eKubeconfigEnv)
	if kubeconfig == "" {
		t.Skipf("needs a disposable API server: set %s", e2eKubeconfigEnv)
	}
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	adminCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	const ns = "edge-load-balancer"
	applyStandaloneRBAC(ctx, t, admin, ns)

	// The node, as kubelet registers it without a cloud provider.
	nodeName := fmt.Sprintf("e2e-node-%d", time.Now().UnixNano())
	node, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	node.Status = v1.NodeStatus{
		Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: lab.Nodes[0].Addr.String()}, {Type: v1.NodeHostName, Address: nodeName}},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The standalone mode, as the manifests' service account, acting from
	// the lab's node (its router client dials from the node's namespace).
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "edge-load-balancer", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saCfg := rest.AnonymousClientConfig(adminCfg)
	saCfg.BearerToken = tok.Status.Token
	router, err := igd.NewClient(lab.ClientConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	cfg := edge.Default()
	cfg.LoadBalancer.SecureMode = true
	cfg.LoadBalancer.NodeName = nodeName
	_, o := standaloneCmd()
	o.classless = true // classless Services must opt in: those that do not get no finalizer
	cloud, err := edge.New(cfg, edge.Options{Client: router, Class: o.class, Classless: o.classless})
	if err != nil {
		t.Fatal(err)
	}
	o.clusterName, o.leaseNamespace, o.bindAddress = "e2e", ns, "127.0.0.1:0"
	// Not under ctx, which the test's deferred cancel ends before any
	// cleanup runs: the Service's cleanup below needs the standalone mode
	// still serving, to remove its finalizer after a failure.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- o.runWith(runCtx, saCfg, cloud) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the standalone mode: %v", err)
		}
	})

	services := admin.CoreV1().Services("default")
	svc, err := services.Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-web"},
		Spec: v1.ServiceSpec{
			Type:              v1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To(DefaultClass),
			Selector:          map[string]string{"app": "web"},
			Ports:             []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 45080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs while the standalone mode still does (cleanups run last
		// first), which removes its finalizer; one it leaves (it failed)
		// is dropped, so that no Service stays stuck in deletion on the
		// API server, failing the next run's create.
		bg := context.Background()
		if err := services.Delete(bg, "e2e-web", metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
			return
		}
		if wait.PollUntilContextTimeout(bg, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := services.Get(ctx, "e2e-web", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}) != nil {
			_, _ = services.Patch(bg, "e2e-web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	})
	nodePort := uint16(svc.Spec.Ports[0].NodePort)

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		svc, err = services.Get(ctx, "e2e-web", metav1.GetOptions{})
		return err == nil && len(svc.Status.LoadBalancer.Ingress) == 1, err
	})
	if err != nil {
		t.Fatalf("no ingress: %v; Service %+v; router log:\n%s", err, svc.Status, lab.Log())
	}
	if ip := svc.Status.LoadBalancer.Ingress[0].IP; ip != lab.ExternalIP.String() {
		t.Errorf("ingress %s, want the router's %s", ip, lab.ExternalIP)
	}
	if !slices.Equal(svc.Finalizers, []string{DefaultClass}) {
		t.Errorf("finalizers %v, want [%s]", svc.Finalizers, DefaultClass)
	}
	table, err := igd.ReadTable(ctx, router)
	if err != nil {
		t.Fatal(err)
	}
	want := igd.Mapping{}
	for _, m := range table {
		if m.ExternalPort == 45080 {
			want = m
		}
	}
	if want.InternalClient != lab.Nodes[0].Addr || want.InternalPort != nodePort {
		t.Errorf("router table %+v: want TCP/45080 -> %s:%d", table, lab.Nodes[0].Addr, nodePort)
	}
	t.Logf("served: %s:45080 -> %s:%d", lab.ExternalIP, want.InternalClient, want.InternalPort)

	// A classless Service that did not opt in is told how (OptInRequired)
	// and gets no finalizer: an uninstall would not leave it Terminating.
	_, err = services.Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-plain"},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "plain"},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 45081, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = services.Delete(context.Background(), "e2e-plain", metav1.DeleteOptions{}) })
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		evs, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=e2e-plain,reason=OptInRequired"})
		return err == nil && len(evs.Items) > 0, err
	})
	if err != nil {
		t.Fatalf("no OptInRequired event on the classless Service: %v", err)
	}
	plain, err := services.Get(ctx, "e2e-plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Finalizers) != 0 {
		t.Errorf("classless Service not opted in: finalizers %v, want none", plain.Finalizers)
	}

	// The router reboots and loses the mapping: the load balancer's own
	// background work (its probe, then a pass, as the service account)
	// repairs the Service of the class; no resync of the class controller.
	lab.Reboot(t)
	rebooted := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		m, err := router.GetPortMapping(ctx, igd.TCP, 45080)
		if errors.Is(err, igd.ErrNoSuchEntry) {
			return false, nil
		}
		return err == nil && m.InternalClient == lab.Nodes[0].Addr && m.InternalPort == nodePort, err
	})
	if err != nil {
		t.Fatalf("TCP/45080 not repaired after a router reboot: %v; router log:\n%s", err, lab.Log())
	}
	t.Logf("repaired %s after the reboot", time.Since(rebooted).Round(100*time.Millisecond))

	// Hand-over: ClusterIP (the API server drops the class with the type),
	// then LoadBalancer under another class: cleaned up here first.
	svc.Spec.Type = v1.ServiceTypeClusterIP
	svc.Spec.Ports[0].NodePort = 0
	if svc, err = services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.LoadBalancerClass != nil {
		t.Errorf("the API server kept class %q on a ClusterIP Service", *svc.Spec.LoadBalancerClass)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		svc, err = services.Get(ctx, "e2e-web", metav1.GetOptions{})
		return err == nil && len(svc.Finalizers) == 0 && len(svc.Status.LoadBalancer.Ingress) == 0, err
	})
	if err != nil {
		t.Fatalf("not cleaned up after ClusterIP: %v; finalizers %v, status %+v", err, svc.Finalizers, svc.Status)
	}
	if table, err = igd.ReadTable(ctx, router); err != nil || len(table) != 0 {
		t.Errorf("router table after ClusterIP: %+v (%v)", table, err)
	}
	svc.Spec.Type, svc.Spec.LoadBalancerClass = v1.ServiceTypeLoadBalancer, ptr.To("example.com/other")
	if svc, err = services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(svc.Finalizers, DefaultClass) {
		t.Errorf("finalizers %v after the hand-over", svc.Finalizers)
	}

	// Deleting it: the real API server waits for the finalizer.
	if err := services.Delete(ctx, "e2e-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		_, err := services.Get(ctx, "e2e-web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("the Service was never deleted: %v", err)
	}
	// Served once more, under the class, and deleted while served.
	svc, err = services.Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-web"},
		Spec: v1.ServiceSpec{
			Type:              v1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To(DefaultClass),
			Selector:          map[string]string{"app": "web"},
			Ports:             []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 45080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		svc, err = services.Get(ctx, "e2e-web", metav1.GetOptions{})
		return err == nil && len(svc.Status.LoadBalancer.Ingress) == 1, err
	})
	if err != nil {
		t.Fatalf("no ingress the second time: %v", err)
	}
	if err := services.Delete(ctx, "e2e-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eBound, true, func(ctx context.Context) (bool, error) {
		_, err := services.Get(ctx, "e2e-web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("the served Service was never deleted: %v", err)
	}
	table, err = igd.ReadTable(ctx, router)
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != 0 {
		t.Errorf("router table after the delete: %+v", table)
	}
	warnings, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err == nil && len(warnings.Items) > 0 {
		for _, e := range warnings.Items {
			t.Logf("warning event %s: %s", e.Reason, e.Message)
		}
	}
}

// applyStandaloneRBAC creates the standalone manifests' namespace, service
// account and RBAC (the kustomization's namespace filled in), replacing
// earlier copies.
func applyStandaloneRBAC(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	for _, obj := range decodeManifests(t, standaloneDir) {
		var err error
		switch o := obj.(type) {
		case *v1.Namespace:
			_, err = admin.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *v1.ServiceAccount:
			o.Namespace = ns
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_ = admin.RbacV1().ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{})
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{})
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = ns
			_ = admin.RbacV1().Roles(ns).Delete(ctx, o.Name, metav1.DeleteOptions{})
			_, err = admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			_ = admin.RbacV1().RoleBindings(ns).Delete(ctx, o.Name, metav1.DeleteOptions{})
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("applying %T: %v", obj, err)
		}
	}
	// RBAC is enforced at once, but the service account's token
	// controller may not run (no kube-controller-manager): TokenRequest
	// needs only the account.
	if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "edge-load-balancer", metav1.GetOptions{}); err != nil {
		t.Fatal(errors.Join(errors.New("the service account was not created"), err))
	}
}
