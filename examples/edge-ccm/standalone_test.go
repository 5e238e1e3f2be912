package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/component-base/logs"

	"github.com/ccmkit/ccmkit/provider/edge"
)

const standaloneDir = "manifests/standalone"

// TestStandaloneManifests checks manifests/standalone: the kustomization
// lists every manifest and names the image, and the Deployment's arguments
// are the mode's flags with a cloud-config that parses (its RBAC:
// TestRBACIsWhatTheCodeUses).
func TestStandaloneManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(standaloneDir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		kustomization
		Namespace string `json:"namespace"`
	}
	k.kustomization, err = decodeKustomization([]byte(strings.Replace(string(data), "namespace: edge-load-balancer\n", "", 1)))
	if err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if got, want := slices.Sorted(slices.Values(k.Resources)), manifestFiles(t, standaloneDir); !slices.Equal(got, want) {
		t.Errorf("%s lists %q, want every manifest %q", kustomizationFile, got, want)
	}
	if !slices.ContainsFunc(k.Images, func(i kustomizeImage) bool { return i.Name == "edge-ccm" }) {
		t.Errorf("%s has no images entry for edge-ccm", kustomizationFile)
	}

	const ns = "edge-load-balancer" // the kustomization's namespace
	var (
		dep   *appsv1.Deployment
		cm    *v1.ConfigMap
		sa    *v1.ServiceAccount
		roles = map[string][]rbacv1.PolicyRule{}
		bound = map[string]bool{}
	)
	for _, obj := range decodeManifests(t, standaloneDir) {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			dep = o
		case *v1.ConfigMap:
			cm = o
		case *v1.ServiceAccount:
			sa = o
		case *v1.Namespace:
		case *rbacv1.ClusterRole:
			roles["ClusterRole//"+o.Name] = o.Rules
		case *rbacv1.Role:
			roles["Role/"+ns+"/"+o.Name] = o.Rules
		case *rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding:
			var subjects []rbacv1.Subject
			var ref rbacv1.RoleRef
			roleNS := ""
			if b, ok := o.(*rbacv1.ClusterRoleBinding); ok {
				subjects, ref = b.Subjects, b.RoleRef
			} else {
				b := o.(*rbacv1.RoleBinding)
				subjects, ref = b.Subjects, b.RoleRef
				if ref.Kind == "Role" {
					roleNS = ns
				}
			}
			for _, s := range subjects {
				if s.Kind == "ServiceAccount" && s.Name == "edge-load-balancer" && s.Namespace == ns {
					bound[ref.Kind+"/"+roleNS+"/"+ref.Name] = true
				}
			}
		default:
			t.Errorf("unexpected object %T", obj)
		}
	}
	if dep == nil || cm == nil || sa == nil {
		t.Fatal("the standalone manifests lack a Deployment, ConfigMap or ServiceAccount")
	}

	t.Run("Deployment", func(t *testing.T) {
		pod := dep.Spec.Template.Spec
		if pod.ServiceAccountName != sa.Name || !pod.HostNetwork {
			t.Errorf("pod runs as %q with hostNetwork %v, want %q and true", pod.ServiceAccountName, pod.HostNetwork, sa.Name)
		}
		if len(pod.Containers) != 1 || len(pod.Containers[0].Args) == 0 || pod.Containers[0].Args[0] != standaloneCommand {
			t.Fatalf("want one container running %q", standaloneCommand)
		}
		c := pod.Containers[0]
		cmd, o := standaloneCmd()
		logs.AddFlags(cmd.PersistentFlags()) // as cli.Run does
		if err := cmd.ParseFlags(c.Args[1:]); err != nil {
			t.Fatalf("args %q: %v", c.Args[1:], err)
		}
		if o.class != DefaultClass || !o.leaderElect || o.clusterName == "kubernetes" {
			t.Errorf("class %q, leader election %v, cluster name %q; want %q, true and a name of its own", o.class, o.leaderElect, o.clusterName, DefaultClass)
		}
		if o.leaseNamespace != "$(POD_NAMESPACE)" || !slices.ContainsFunc(c.Env, func(e v1.EnvVar) bool {
			return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
		}) {
			t.Errorf("the Lease's namespace %q is not the pod's own", o.leaseNamespace)
		}
		if filepath.Dir(o.cloudConfig) != c.VolumeMounts[0].MountPath || pod.Volumes[0].ConfigMap.Name != cm.Name {
			t.Errorf("--cloud-config=%s is not in the mounted ConfigMap %s", o.cloudConfig, cm.Name)
		}
		if _, err := edge.ParseConfig(strings.NewReader(cm.Data[filepath.Base(o.cloudConfig)])); err != nil {
			t.Errorf("ConfigMap %s: %v", cm.Name, err)
		}
		// The liveness probe asks the port the mode serves /healthz on.
		_, bindPort, _ := net.SplitHostPort(o.bindAddress)
		probe := c.LivenessProbe
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/healthz" || len(c.Ports) != 1 ||
			probe.HTTPGet.Port.String() != c.Ports[0].Name || fmt.Sprint(c.Ports[0].ContainerPort) != bindPort {
			t.Errorf("liveness probe %+v on ports %+v, want GET /healthz on the --bind-address port %s", probe, c.Ports, bindPort)
		}
	})
}

// The standalone mode serves /healthz and the load balancer's and the
// router client's metrics on --bind-address.
func TestStandaloneServesHealthAndMetrics(t *testing.T) {
	_, o := standaloneCmd()
	o.bindAddress = "127.0.0.1:0"
	addr, stop, err := o.serveHTTP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(body)
	}
	if got := get("/healthz"); got != "ok" {
		t.Errorf("/healthz = %q, want ok", got)
	}
	metrics := get("/metrics")
	for _, name := range []string{"cloudprovider_ccmkit_routers_known", "cloudprovider_ccmkit_mappings_held"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	o.bindAddress = addr.String() // taken
	if _, _, err := o.serveHTTP(t.Context()); err == nil || !strings.Contains(err.Error(), "--bind-address") {
		t.Errorf("second bind = %v, want an error naming --bind-address", err)
	}
}

// The standalone mode serves /metrics without authentication, so by
// default only on the loopback address; the Deployment's liveness probe
// asks there (the pod shares the node's network, as the kubelet does).
func TestStandaloneMetricsOnLoopbackByDefault(t *testing.T) {
	_, o := standaloneCmd()
	host, _, err := net.SplitHostPort(o.bindAddress)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("default --bind-address %q is not a loopback address", o.bindAddress)
	}
	var dep *appsv1.Deployment
	for _, obj := range decodeManifests(t, standaloneDir) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("no Deployment")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	cmd, o := standaloneCmd()
	logs.AddFlags(cmd.PersistentFlags())
	if err := cmd.ParseFlags(c.Args[1:]); err != nil {
		t.Fatal(err)
	}
	host, _, _ = net.SplitHostPort(o.bindAddress)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("the Deployment serves /metrics on %q, not a loopback address", o.bindAddress)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Host != host {
		t.Errorf("liveness probe %+v does not ask %s, where /healthz is served", p, host)
	}
}
