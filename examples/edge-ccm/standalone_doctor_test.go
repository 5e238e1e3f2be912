package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestStandaloneDoctorManifests checks manifests/standalone/doctor: the Job
// runs in the standalone namespace on the host network with the standalone
// ConfigMap, its flags parse and name a key of it, and its service account
// may list Services (for their ports) and nothing else.
func TestStandaloneDoctorManifests(t *testing.T) {
	dir := filepath.Join(standaloneDir, "doctor")
	data, err := os.ReadFile(filepath.Join(dir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	const ns = "edge-load-balancer"
	k, err := decodeKustomization([]byte(strings.Replace(string(data), "namespace: "+ns+"\n", "", 1)))
	if err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if got, want := slices.Sorted(slices.Values(k.Resources)), manifestFiles(t, dir); !slices.Equal(got, want) {
		t.Errorf("%s lists %q, want every manifest %q", kustomizationFile, got, want)
	}
	if !strings.Contains(string(data), "\nnamespace: "+ns+"\n") {
		t.Errorf("%s does not put the Job in %s, the standalone namespace", kustomizationFile, ns)
	}
	var cm *v1.ConfigMap
	for _, o := range decodeManifests(t, standaloneDir) {
		if c, ok := o.(*v1.ConfigMap); ok {
			cm = c
		}
	}
	var (
		job   *batchv1.Job
		sa    *v1.ServiceAccount
		rules []rbacv1.PolicyRule
		bound bool
	)
	for _, o := range decodeManifests(t, dir) {
		switch o := o.(type) {
		case *batchv1.Job:
			job = o
		case *v1.ServiceAccount:
			sa = o
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.ClusterRoleBinding:
			bound = len(o.Subjects) == 1 && o.Subjects[0].Name == "edge-ccm-doctor" && o.Subjects[0].Namespace == ns && o.RoleRef.Name == "edge-ccm-doctor"
		default:
			t.Errorf("unexpected object %T", o)
		}
	}
	if job == nil || sa == nil || cm == nil {
		t.Fatal("want a Job, its ServiceAccount and the standalone ConfigMap")
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list"}}}
	if !bound || len(rules) != 1 || !slices.Equal(rules[0].Resources, want[0].Resources) || !slices.Equal(rules[0].Verbs, want[0].Verbs) || !slices.Equal(rules[0].APIGroups, want[0].APIGroups) {
		t.Errorf("the doctor's RBAC: bound %v, rules %+v; want list services only", bound, rules)
	}
	pod := job.Spec.Template.Spec
	if !pod.HostNetwork || pod.ServiceAccountName != sa.Name || (pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken) {
		t.Errorf("Job: hostNetwork %v, service account %q; want the host network and %q's token", pod.HostNetwork, pod.ServiceAccountName, sa.Name)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != cm.Name {
		t.Errorf("Job volumes %+v, want the standalone ConfigMap %s", pod.Volumes, cm.Name)
	}
	c := pod.Containers[0]
	if len(c.Args) < 1 || c.Args[0] != doctorCommand {
		t.Fatalf("Job args %q, want %q first", c.Args, doctorCommand)
	}
	var out, errOut bytes.Buffer
	args := append(slices.Clone(c.Args[1:]), "--output", "bogus") // stops after parsing
	if code := doctor(t.Context(), args, &out, &errOut, doctorNet{}); code != exitCannotCheck || !strings.Contains(errOut.String(), "--output \"bogus\"") {
		t.Errorf("the Job's flags %q do not parse: %s", c.Args[1:], errOut.String())
	}
	for _, a := range c.Args {
		if f, ok := strings.CutPrefix(a, "--cloud-config="); ok {
			if _, in := cm.Data[filepath.Base(f)]; !in || filepath.Dir(f) != c.VolumeMounts[0].MountPath {
				t.Errorf("--cloud-config=%s is not a key of ConfigMap %s mounted at %s", f, cm.Name, c.VolumeMounts[0].MountPath)
			}
		}
	}
}
