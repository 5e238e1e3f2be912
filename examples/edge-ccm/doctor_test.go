package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/routercheck"
)

// The doctor on the lab router, configured as routers are shipped, with the
// cloud-config an operator would deploy: its exit status says whether
// edge-ccm will work, and the first failed check names the fix.
func TestLabDoctor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lab         igdtest.Options
		cloudConfig string
		wantExit    int
		wantProblem string
	}{
		{"open router, defaults", igdtest.Options{}, "", 0, ""},
		{"secure mode, not configured", igdtest.Options{SecureMode: true}, "loadBalancer:\n  secureMode: false\n", exitProblem, routercheck.CheckSecureMode},
		{"secure mode, configured", igdtest.Options{SecureMode: true}, "loadBalancer:\n  secureMode: true\n", 0, ""},
		{"OpenWrt default, sample config", igdtest.OpenWrtDefault(), sampleCloudConfig(t), 0, ""},
		{"OpenWrt default, library defaults", igdtest.OpenWrtDefault(), "", exitProblem, routercheck.CheckSecureMode},
		{"ports 1024 and up only", igdtest.HighPortsOnly(), "", 0, ""},
		{"behind CGNAT", igdtest.BehindCGNAT(), "", exitProblem, routercheck.CheckExternalIP},
		{"behind CGNAT, non-public allowed", igdtest.BehindCGNAT(), "loadBalancer:\n  allowNonPublicExternalIP: true\n", exitProblem, routercheck.CheckExternalIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, tc.lab)
			pcpClient, err := pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(lab.RouterLAN, pcp.Port), DialContext: lab.Nodes[0].DialContext})
			if err != nil {
				t.Fatal(err)
			}
			dial := doctorNet{igd: func(igd.Config) igd.Config { return lab.ClientConfig(0) }, pcp: pcpClient}
			path := filepath.Join(t.TempDir(), "cloud-config.yaml")
			if err := os.WriteFile(path, []byte(tc.cloudConfig), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			code := doctor(t.Context(), []string{"--cloud-config", path, "--output", "json"}, &out, &errOut, dial)
			if code != tc.wantExit {
				t.Errorf("exit status %d, want %d; stderr: %s", code, tc.wantExit, errOut.String())
			}
			var rep routercheck.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("--output json: %v\n%s", err, out.String())
			}
			var problem string
			if p := rep.Problem(); p != nil {
				problem = p.Check
			}
			if problem != tc.wantProblem {
				t.Errorf("first problem %q, want %q; findings %+v", problem, tc.wantProblem, rep.Findings)
			}
			// Every usable lab router refuses ports below 1024 (its
			// permission rules): a warning, not a failure.
			for _, f := range rep.Findings {
				if f.Check == routercheck.CheckLowPorts && rep.Gateway.Location != "" && f.Status != routercheck.Warn {
					t.Errorf("%s: %s (%s), want %s", f.Check, f.Status, f.Detail, routercheck.Warn)
				}
			}
			// The table says the same, in words.
			out.Reset()
			if code := doctor(t.Context(), []string{"--cloud-config", path}, &out, &errOut, dial); code != tc.wantExit {
				t.Errorf("table run: exit status %d, want %d", code, tc.wantExit)
			}
			verdict := "edge-ccm will work with this cloud-config."
			if tc.wantProblem != "" {
				verdict = "Fix first: " + tc.wantProblem + ": "
			}
			if !strings.Contains(out.String(), verdict) {
				t.Errorf("table output lacks %q:\n%s", verdict, out.String())
			}
		})
	}
}

// sampleCloudConfig is the cloud-config of the CCM's manifests.
func sampleCloudConfig(t *testing.T) string {
	t.Helper()
	for _, o := range decodeManifests(t, "manifests") {
		if cm, ok := o.(*v1.ConfigMap); ok {
			return cm.Data["cloud-config.yaml"]
		}
	}
	t.Fatal("no ConfigMap in manifests")
	return ""
}

func TestDoctorRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--output", "yaml"},
		{"--other-host", "fe80::1"},
		{"--cloud-config", filepath.Join(t.TempDir(), "missing.yaml")},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		if code := doctor(t.Context(), args, &out, &errOut, doctorNet{}); code != exitCannotCheck || errOut.Len() == 0 {
			t.Errorf("doctor %q = %d with stderr %q, want %d and the flag named", args, code, errOut.String(), exitCannotCheck)
		}
	}
}

// TestDoctorManifests checks manifests/doctor: the kustomization lists the
// Job and names the image, and the Job runs the doctor on the host network
// with the CCM's cloud-config, without API access.
func TestDoctorManifests(t *testing.T) {
	const dir = "manifests/doctor"
	data, err := os.ReadFile(filepath.Join(dir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	k, err := decodeKustomization(data)
	if err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if got, want := strings.Join(k.Resources, ","), strings.Join(manifestFiles(t, dir), ","); got != want {
		t.Errorf("%s lists %q, want every manifest %q", kustomizationFile, got, want)
	}
	objs := decodeManifests(t, dir)
	job, ok := objs[0].(*batchv1.Job)
	if len(objs) != 1 || !ok {
		t.Fatalf("want one Job, got %T", objs)
	}
	var cm *v1.ConfigMap
	for _, o := range decodeManifests(t, "manifests") {
		if c, ok := o.(*v1.ConfigMap); ok {
			cm = c
		}
	}
	pod := job.Spec.Template.Spec
	if !pod.HostNetwork || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || job.Namespace != cm.Namespace {
		t.Errorf("Job: hostNetwork %v, automount %v, namespace %q; want host network, no token, namespace %q", pod.HostNetwork, pod.AutomountServiceAccountToken, job.Namespace, cm.Namespace)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != cm.Name {
		t.Errorf("Job volumes %+v, want the ConfigMap %s", pod.Volumes, cm.Name)
	}
	c := pod.Containers[0]
	if len(c.Args) < 1 || c.Args[0] != doctorCommand {
		t.Fatalf("Job args %q, want %q first", c.Args, doctorCommand)
	}
	// Its flags parse, and name a cloud-config file in the mounted
	// ConfigMap.
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
