package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	serjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// TestSampleCloudConfig loads cloud-config.yaml through the edge parser: it
// must be valid and, since it documents the defaults, mean exactly Default().
func TestSampleCloudConfig(t *testing.T) {
	f, err := os.Open("cloud-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	cfg, err := edge.ParseConfig(f)
	if err != nil {
		t.Fatalf("cloud-config.yaml: %v", err)
	}
	if diff := cmp.Diff(edge.Default(), cfg); diff != "" {
		t.Errorf("cloud-config.yaml shows values that are not the defaults (-default +file):\n%s", diff)
	}
}

// strictDecoder decodes YAML manifests with the Kubernetes scheme, failing on
// unknown and duplicate fields as kubectl --validate=strict does.
func strictDecoder() runtime.Decoder {
	return serjson.NewSerializerWithOptions(serjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		serjson.SerializerOptions{Yaml: true, Strict: true})
}

// kustomizationFile is the kustomize file beside the manifests; it is not a
// Kubernetes object, so decodeManifests leaves it to TestKustomization.
const kustomizationFile = "kustomization.yaml"

// manifestFiles returns the names of the manifests under dir, sorted, without
// the kustomization.
func manifestFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if name := filepath.Base(f); name != kustomizationFile {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	return names
}

// decodeManifests decodes every document of every manifest under dir.
func decodeManifests(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, name := range manifestFiles(t, dir) {
		file := filepath.Join(dir, name)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := decodeAll(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, docs...)
	}
	return objs
}

// decodeAll strictly decodes each non-empty document of a multi-document
// YAML stream.
func decodeAll(data []byte) ([]runtime.Object, error) {
	dec := strictDecoder()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, &docError{index: i, err: err}
		}
		objs = append(objs, obj)
	}
}

type docError struct {
	index int
	err   error
}

func (e *docError) Error() string { return fmt.Sprintf("document %d: %v", e.index, e.err) }
func (e *docError) Unwrap() error { return e.err }

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for line := range strings.SplitSeq(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out.WriteString(line + "\n")
		}
	}
	return out.Bytes()
}

// TestStrictDecoderCatchesMistakes proves the decoder used on the manifests
// fails on a mistyped field, a duplicate field and a wrong value type.
func TestStrictDecoderCatchesMistakes(t *testing.T) {
	tests := map[string]string{
		"mistyped field":  "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n  namespce: kube-system\n",
		"duplicate field": "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n  name: y\n",
		"wrong type":      "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      hostNetwork: \"yes\"\n",
		"unknown kind":    "apiVersion: v1\nkind: Frobnicator\nmetadata:\n  name: x\n",
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			if objs, err := decodeAll([]byte(doc)); err == nil {
				t.Fatalf("decoded %v without error", objs)
			}
		})
	}
}

// kustomization is the part of kustomize's Kustomization the manifests use;
// decoding strictly into it fails on any other key.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Resources  []string         `json:"resources"`
	Images     []kustomizeImage `json:"images"`
}

type kustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

func decodeKustomization(data []byte) (kustomization, error) {
	var k kustomization
	err := sigsyaml.UnmarshalStrict(data, &k)
	return k, err
}

// TestKustomization checks manifests/kustomization.yaml: it decodes strictly,
// lists every manifest, and has an images entry for every container image of
// the manifests, so `kustomize edit set image edge-ccm=...` sets the image.
func TestKustomization(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("manifests", kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	k, err := decodeKustomization(data)
	if err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s is %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", kustomizationFile, k.APIVersion, k.Kind)
	}
	if got, want := slices.Sorted(slices.Values(k.Resources)), manifestFiles(t, "manifests"); !slices.Equal(got, want) {
		t.Errorf("%s lists resources %q, want every manifest %q", kustomizationFile, got, want)
	}
	images := map[string]kustomizeImage{}
	for _, img := range k.Images {
		images[img.Name] = img
	}
	var seen int
	for _, obj := range decodeManifests(t, "manifests") {
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		for _, c := range slices.Concat(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers) {
			seen++
			img, ok := images[c.Image]
			if !ok {
				t.Errorf("container %s's image %q has no images entry in %s", c.Name, c.Image, kustomizationFile)
				continue
			}
			if img.NewName == "" || (img.NewTag == "" && img.Digest == "") {
				t.Errorf("images entry %q sets no full image (newName and newTag or digest): %+v", img.Name, img)
			}
		}
	}
	if seen == 0 {
		t.Error("no DaemonSet container in the manifests")
	}

	t.Run("strict", func(t *testing.T) {
		if _, err := decodeKustomization([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimage:\n- name: x\n")); err == nil {
			t.Error("a mistyped key decoded without error")
		}
	})
}

func TestManifests(t *testing.T) {
	objs := decodeManifests(t, "manifests")

	var (
		sa        *v1.ServiceAccount
		cm        *v1.ConfigMap
		ds        *appsv1.DaemonSet
		roles     = map[string][]rbacv1.PolicyRule{} // "Kind/namespace/name"
		bindings  []rbacv1.Subject
		roleBound = map[string]bool{} // role key -> bound to our SA
	)
	for _, obj := range objs {
		switch o := obj.(type) {
		case *v1.ServiceAccount:
			sa = o
		case *v1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		case *rbacv1.ClusterRole:
			roles["ClusterRole//"+o.Name] = o.Rules
		case *rbacv1.Role:
			roles["Role/"+o.Namespace+"/"+o.Name] = o.Rules
		case *rbacv1.ClusterRoleBinding:
			bindings = append(bindings, o.Subjects...)
			for _, s := range o.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == "cloud-controller-manager" && s.Namespace == "kube-system" {
					roleBound[o.RoleRef.Kind+"//"+o.RoleRef.Name] = true
				}
			}
		case *rbacv1.RoleBinding:
			bindings = append(bindings, o.Subjects...)
			for _, s := range o.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == "cloud-controller-manager" && s.Namespace == "kube-system" {
					ns := o.Namespace
					if o.RoleRef.Kind == "ClusterRole" {
						ns = ""
					}
					roleBound[o.RoleRef.Kind+"/"+ns+"/"+o.RoleRef.Name] = true
				}
			}
		default:
			t.Errorf("unexpected object %T in manifests", obj)
		}
	}
	if sa == nil || cm == nil || ds == nil || len(bindings) == 0 {
		t.Fatalf("manifests lack a ServiceAccount, ConfigMap, DaemonSet or bindings (found %d objects)", len(objs))
	}

	t.Run("cloud-config in the ConfigMap", func(t *testing.T) {
		data, ok := cm.Data["cloud-config.yaml"]
		if !ok {
			t.Fatalf("ConfigMap %s has no cloud-config.yaml key", cm.Name)
		}
		if _, err := edge.ParseConfig(strings.NewReader(data)); err != nil {
			t.Errorf("ConfigMap %s: %v", cm.Name, err)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		// The rules: TestRBACIsWhatTheCodeUses. The roles bound for the
		// controller manager's delegated authentication:
		for _, r := range []string{"ClusterRole//system:auth-delegator", "Role/kube-system/extension-apiserver-authentication-reader"} {
			if !roleBound[r] {
				t.Errorf("%s is not bound to the service account (delegated authentication)", r)
			}
		}
	})

	t.Run("DaemonSet", func(t *testing.T) {
		pod := ds.Spec.Template.Spec
		if pod.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
			t.Errorf("DaemonSet runs as %s/%s, want the ServiceAccount %s/%s", ds.Namespace, pod.ServiceAccountName, sa.Namespace, sa.Name)
		}
		if !pod.HostNetwork {
			t.Error("hostNetwork is false: SSDP and secure-mode routers need the node's address")
		}
		for _, taint := range []v1.Taint{
			{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule},
			{Key: "node-role.kubernetes.io/control-plane", Effect: v1.TaintEffectNoSchedule},
			{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule},
		} {
			if !slices.ContainsFunc(pod.Tolerations, func(tol v1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
				t.Errorf("no toleration for taint %s", taint.ToString())
			}
		}
		// It must land on control-plane nodes as kubeadm (label value "")
		// and k3s (value "true") label them, and on no other node.
		affinity := nodeaffinity.GetRequiredNodeAffinity(&v1.Pod{Spec: pod})
		for _, tc := range []struct {
			labels map[string]string
			want   bool
		}{
			{map[string]string{"node-role.kubernetes.io/control-plane": ""}, true},
			{map[string]string{"node-role.kubernetes.io/control-plane": "true"}, true},
			{map[string]string{"node-role.kubernetes.io/worker": "true"}, false},
		} {
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}}
			if got, err := affinity.Match(node); err != nil || got != tc.want {
				t.Errorf("pod scheduling on a node labelled %v: %v (%v), want %v", tc.labels, got, err, tc.want)
			}
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("want one container, got %d", len(pod.Containers))
		}
		c := pod.Containers[0]
		flags := map[string]string{}
		for _, a := range c.Args {
			k, v, _ := strings.Cut(a, "=")
			flags[k] = v
		}
		if flags["--cloud-provider"] != edge.ProviderName {
			t.Errorf("--cloud-provider=%q, want %q", flags["--cloud-provider"], edge.ProviderName)
		}
		if flags["--cluster-name"] == "" {
			t.Error("no --cluster-name: it is part of the owner of every router mapping")
		}
		if flags["--leader-elect"] != "true" {
			t.Errorf("--leader-elect=%q, want true", flags["--leader-elect"])
		}
		for ctrl := range strings.SplitSeq(flags["--controllers"], ",") {
			if _, known := app.DefaultInitFuncConstructors[ctrl]; !known && ctrl != "*" {
				t.Errorf("--controllers names %q, not a controller of k8s.io/cloud-provider/app", ctrl)
			}
		}
		// --cloud-config must point into the mounted ConfigMap.
		cfgPath := flags["--cloud-config"]
		mounted := false
		for _, m := range c.VolumeMounts {
			if filepath.Dir(cfgPath) != filepath.Clean(m.MountPath) {
				continue
			}
			for _, vol := range pod.Volumes {
				if vol.Name == m.Name && vol.ConfigMap != nil && vol.ConfigMap.Name == cm.Name {
					_, hasKey := cm.Data[filepath.Base(cfgPath)]
					mounted = hasKey
				}
			}
		}
		if !mounted {
			t.Errorf("--cloud-config=%q is not a key of ConfigMap %s mounted in the container", cfgPath, cm.Name)
		}
		nodeName := slices.IndexFunc(c.Env, func(e v1.EnvVar) bool {
			return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
		})
		if nodeName < 0 {
			t.Error("NODE_NAME is not set from the downward API (spec.nodeName)")
		}
		sc := c.SecurityContext
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Error("the pod may run as root")
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("the container allows privilege escalation")
		}
	})
}

// allowed reports whether a rule of a role bound to the CCM's service account
// allows verb on group/resource in namespace ("" = cluster-wide).
func allowed(roles map[string][]rbacv1.PolicyRule, bound map[string]bool, group, resource, verb, namespace string) bool {
	for key, rules := range roles {
		if !bound[key] {
			continue
		}
		kind, rest, _ := strings.Cut(key, "/")
		roleNS, _, _ := strings.Cut(rest, "/")
		if kind == "Role" && roleNS != namespace {
			continue
		}
		for _, r := range rules {
			if matches(r.APIGroups, group) && matches(r.Resources, resource) && matches(r.Verbs, verb) {
				return true
			}
		}
	}
	return false
}

func matches(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}

// podOf returns the pod template of the one DaemonSet or Deployment of objs.
func podOf(t *testing.T, objs []runtime.Object) v1.PodSpec {
	t.Helper()
	for _, obj := range objs {
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			return o.Spec.Template.Spec
		case *appsv1.Deployment:
			return o.Spec.Template.Spec
		}
	}
	t.Fatal("no DaemonSet or Deployment")
	return v1.PodSpec{}
}

// TestManifestsProtectThePCPSecret checks, in both modes, that the PCP
// Secret is mounted (optional, so that `pcp` works as shipped once it is
// created) where the README says, readable only by its owner and the pod's
// group (0440 and fsGroup: never by other users of the node), and that the
// container runs in that group.
func TestManifestsProtectThePCPSecret(t *testing.T) {
	for _, dir := range []string{"manifests", standaloneDir} {
		t.Run(dir, func(t *testing.T) {
			pod := podOf(t, decodeManifests(t, dir))
			i := slices.IndexFunc(pod.Volumes, func(v v1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "edge-ccm-pcp" })
			if i < 0 {
				t.Fatal("the Secret edge-ccm-pcp is not mounted: gateway.protocol pcp cannot be used as shipped")
			}
			vol := pod.Volumes[i].Secret
			if vol.Optional == nil || !*vol.Optional {
				t.Error("the Secret volume is not optional: the pod would not start without it")
			}
			if vol.DefaultMode == nil || *vol.DefaultMode != 0o440 {
				t.Errorf("the Secret's files have mode %#o, want 0440 (owner and the pod's group only)", ptrValue(vol.DefaultMode))
			}
			sc := pod.SecurityContext
			if sc == nil || sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup {
				t.Errorf("pod securityContext %+v: fsGroup must be set and be the group the container runs as, so that it reads a 0440 Secret", sc)
			}
			c := pod.Containers[0]
			if !slices.ContainsFunc(c.VolumeMounts, func(m v1.VolumeMount) bool {
				return m.Name == pod.Volumes[i].Name && m.MountPath == "/etc/edge-ccm-pcp" && m.ReadOnly
			}) {
				t.Errorf("the Secret is not mounted read-only at /etc/edge-ccm-pcp (gateway.pcpSecretFile: /etc/edge-ccm-pcp/secret): %+v", c.VolumeMounts)
			}
		})
	}
}

func ptrValue[T any](p *T) (v T) {
	if p != nil {
		v = *p
	}
	return v
}

// TestCCMManifestTurnsProfilingOff parses the CCM's arguments with the
// cloud-controller-manager's own flags: each must be one of them, and
// profiling (/debug/pprof, on by default) must be off.
func TestCCMManifestTurnsProfilingOff(t *testing.T) {
	c := podOf(t, decodeManifests(t, "manifests")).Containers[0]
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	cmd := app.NewCloudControllerManagerCommand(opts, initCloud, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, nil)
	if err := cmd.ParseFlags(c.Args); err != nil {
		t.Fatalf("args %q: %v", c.Args, err)
	}
	if opts.Generic.Debugging.EnableProfiling {
		t.Errorf("args %q leave profiling on: want --profiling=false", c.Args)
	}
}

// TestStandaloneNamespaceForPodSecurity checks the standalone namespace's
// Pod Security labels: enforce privileged (the pod needs the host network),
// warn and audit restricted (any other pod put there is flagged).
func TestStandaloneNamespaceForPodSecurity(t *testing.T) {
	var ns *v1.Namespace
	for _, obj := range decodeManifests(t, standaloneDir) {
		if o, ok := obj.(*v1.Namespace); ok {
			ns = o
		}
	}
	if ns == nil {
		t.Fatal("no Namespace in the standalone manifests")
	}
	want := map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	}
	for k, v := range want {
		if ns.Labels[k] != v {
			t.Errorf("namespace %s label %s=%q, want %q", ns.Name, k, ns.Labels[k], v)
		}
	}
}

// TestRouterExposurePolicy decodes the optional policy of manifests/policy
// and runs its CEL, as the API server would, on Services: in a namespace not
// allowed, one that opts in to edge-ccm (the annotation, the legacy one, or
// the class) is denied with a message naming it, others pass; the binding
// applies to every namespace but those labelled allowed.
func TestRouterExposurePolicy(t *testing.T) {
	const dir = "manifests/policy"
	data, err := os.ReadFile(filepath.Join(dir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	k, err := decodeKustomization(data)
	if err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if got, want := slices.Sorted(slices.Values(k.Resources)), manifestFiles(t, dir); !slices.Equal(got, want) {
		t.Errorf("%s lists %q, want every manifest %q", kustomizationFile, got, want)
	}
	var policy *admissionv1.ValidatingAdmissionPolicy
	var binding *admissionv1.ValidatingAdmissionPolicyBinding
	for _, obj := range decodeManifests(t, dir) {
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			policy = o
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			binding = o
		default:
			t.Errorf("unexpected object %T", obj)
		}
	}
	if policy == nil || binding == nil {
		t.Fatal("want a ValidatingAdmissionPolicy and its binding")
	}
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding %s binds %q with %v, want policy %s with Deny", binding.Name, binding.Spec.PolicyName, binding.Spec.ValidationActions, policy.Name)
	}

	t.Run("binding's namespaces", func(t *testing.T) {
		sel, err := metav1.LabelSelectorAsSelector(binding.Spec.MatchResources.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			labels map[string]string
			want   bool
		}{
			{nil, true},
			{map[string]string{"ccmkit.io/router-exposure": "allowed"}, false},
			{map[string]string{"ccmkit.io/router-exposure": "no"}, true},
		} {
			if got := sel.Matches(labels.Set(tc.labels)); got != tc.want {
				t.Errorf("namespace labelled %v checked: %v, want %v", tc.labels, got, tc.want)
			}
		}
	})

	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	program := func(expr string) cel.Program {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%q: %v", expr, iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if len(policy.Spec.Variables) != 1 || len(policy.Spec.Validations) != 1 {
		t.Fatalf("want one variable and one validation, got %d and %d", len(policy.Spec.Variables), len(policy.Spec.Validations))
	}
	exposes, valid, message := program(policy.Spec.Variables[0].Expression), program(policy.Spec.Validations[0].Expression), program(policy.Spec.Validations[0].MessageExpression)
	class := loadbalancer.AnnotationValue // any other class
	for _, tc := range []struct {
		name    string
		svc     *v1.Service
		allowed bool
	}{
		{"annotated", newService(func(s *v1.Service) {
			s.Annotations = map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}
		}), false},
		{"legacy annotation", newService(func(s *v1.Service) {
			s.Annotations = map[string]string{loadbalancer.LegacyAnnotationLoadBalancerType: loadbalancer.AnnotationValue}
		}), false},
		{"class", newService(func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To(DefaultClass) }), false},
		{"plain", newService(func(*v1.Service) {}), true},
		{"another annotation", newService(func(s *v1.Service) { s.Annotations = map[string]string{"example.com/x": "y"} }), true},
		{"another class", newService(func(s *v1.Service) { s.Spec.LoadBalancerClass = &class }), true},
		{"annotated, not a LoadBalancer", newService(func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Annotations = map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}
		}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.svc)
			if err != nil {
				t.Fatal(err)
			}
			in := map[string]any{"object": obj, "variables": map[string]any{}}
			e, _, err := exposes.Eval(in)
			if err != nil {
				t.Fatalf("exposes: %v", err)
			}
			in["variables"] = map[string]any{"exposes": e.Value()}
			ok, _, err := valid.Eval(in)
			if err != nil || ok.Value() != tc.allowed {
				t.Errorf("validation = %v (%v), want %v", ok, err, tc.allowed)
			}
			if msg, _, err := message.Eval(in); err != nil || !strings.Contains(fmt.Sprint(msg.Value()), "Service web/site may not be exposed on the router") {
				t.Errorf("message = %v (%v)", msg, err)
			}
		})
	}
}

// newService returns a Service web/site of type LoadBalancer changed by f.
func newService(f func(*v1.Service)) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "site"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	f(s)
	return s
}
