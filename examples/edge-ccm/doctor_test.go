package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/internal/upnp"
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
			path := cloudConfig(t, tc.cloudConfig)
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
		{"--kubeconfig", filepath.Join(t.TempDir(), "missing-kubeconfig")},
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

// allow80To443 is the lab's high-ports router with the doctor's own fix for
// ports below 1024 applied, as miniupnpd.conf writes it.
func allow80To443() igdtest.Options {
	o := igdtest.HighPortsOnly()
	o.Permissions = append([]string{"allow 80-443 192.0.2.0/24 1024-65535"}, o.Permissions...)
	return o
}

// After the operator allows 80-443 on the router, `doctor --ports` probes
// those ports and says the router allows them (no warning about ports below
// 1024 left), and names the one it still refuses with the rule to add.
func TestLabDoctorPorts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ports       string
		wantExit    int
		wantProblem string
		wantPorts   map[string]routercheck.Status
	}{
		{"allowed", "80,443,8443/tcp,443/udp", 0, "",
			map[string]routercheck.Status{"TCP/80": routercheck.OK, "TCP/443": routercheck.OK, "TCP/8443": routercheck.OK, "UDP/443": routercheck.OK}},
		{"one refused", "80,22", exitProblem, "port TCP/22",
			map[string]routercheck.Status{"TCP/80": routercheck.OK, "TCP/22": routercheck.Fail}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, allow80To443())
			pcpClient, err := pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(lab.RouterLAN, pcp.Port), DialContext: lab.Nodes[0].DialContext})
			if err != nil {
				t.Fatal(err)
			}
			dial := doctorNet{igd: func(igd.Config) igd.Config { return lab.ClientConfig(0) }, pcp: pcpClient}
			var out, errOut bytes.Buffer
			code := doctor(t.Context(), []string{"--ports", tc.ports, "--output", "json"}, &out, &errOut, dial)
			if code != tc.wantExit {
				t.Errorf("exit status %d, want %d; stderr: %s", code, tc.wantExit, errOut.String())
			}
			var rep routercheck.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("--output json: %v\n%s", err, out.String())
			}
			got := map[string]routercheck.Status{}
			for _, f := range rep.Findings {
				if f.Check == routercheck.CheckPort {
					got[f.Port.String()] = f.Status
				}
				if f.Check == routercheck.CheckLowPorts && f.Status == routercheck.Warn {
					t.Errorf("%s warns (%s) although the ports given below 1024 are allowed", f.Check, f.Detail)
				}
			}
			if d := cmp.Diff(tc.wantPorts, got); d != "" {
				t.Errorf("per-port statuses (-want +got):\n%s", d)
			}
			out.Reset()
			doctor(t.Context(), []string{"--ports", tc.ports}, &out, &errOut, dial)
			verdict := "edge-ccm will work with this cloud-config."
			if tc.wantProblem != "" {
				verdict = "Fix first: " + tc.wantProblem + ": allow external port 22"
			}
			if !strings.Contains(out.String(), verdict) {
				t.Errorf("table output lacks %q:\n%s", verdict, out.String())
			}
		})
	}
}

// With API access and no --ports, the doctor probes the ports of the
// LoadBalancer Services the edge load balancer may serve (its class, or
// none), says which Services want each, and leaves other classes' alone.
func TestDoctorProbesTheServicesPorts(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if m.ExternalPort < 1024 { // OpenWrt's default rules
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeNotAuthorized, Description: "Action not authorized"}
		}
		return next(ctx, m)
	}})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	lb := func(ns, name string, class *string, ports ...v1.ServicePort) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, LoadBalancerClass: class, Ports: ports}}
	}
	tcp := func(p int32) v1.ServicePort { return v1.ServicePort{Protocol: v1.ProtocolTCP, Port: p} }
	ours, metallb := DefaultClass, "metallb.io/metallb"
	clusterIP := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, Spec: v1.ServiceSpec{Ports: []v1.ServicePort{tcp(5432)}}}
	kube := k8sfake.NewClientset(
		lb("kube-system", "traefik", nil, tcp(80), tcp(443)),
		lb("default", "web", &ours, tcp(8080), v1.ServicePort{Protocol: v1.ProtocolUDP, Port: 8080}),
		lb("default", "other", &metallb, tcp(9000)),
		clusterIP,
	)
	dial := doctorNet{igd: func(igd.Config) igd.Config { return igd.Config{RootDescURL: srv.RootDescURL} }, kube: kube}
	var out, errOut bytes.Buffer
	code := doctor(t.Context(), []string{"--output", "json", "--other-host", "192.0.2.99"}, &out, &errOut, dial)
	if code != exitProblem {
		t.Errorf("exit status %d, want %d (ports 80 and 443 refused); stderr: %s", code, exitProblem, errOut.String())
	}
	var rep routercheck.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out.String())
	}
	type port struct {
		Status   routercheck.Status
		Services bool // the detail names the Services
	}
	want := map[string]port{
		"TCP/80": {routercheck.Fail, true}, "TCP/443": {routercheck.Fail, true},
		"TCP/8080": {routercheck.OK, true}, "UDP/8080": {routercheck.OK, true},
	}
	wanted := map[string]string{"TCP/80": "kube-system/traefik", "TCP/443": "kube-system/traefik", "TCP/8080": "default/web", "UDP/8080": "default/web"}
	got := map[string]port{}
	for _, f := range rep.Findings {
		if f.Check == routercheck.CheckPort {
			got[f.Port.String()] = port{f.Status, strings.Contains(f.Detail, "wanted by "+wanted[f.Port.String()])}
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("per-port findings (-want +got):\n%s", d)
	}
}

func TestDoctorRefusesBadPorts(t *testing.T) {
	for _, ports := range []string{"0", "80,", "http", "80/sctp", "65536", "80-90"} {
		var out, errOut bytes.Buffer
		if code := doctor(t.Context(), []string{"--ports", ports}, &out, &errOut, doctorNet{}); code != exitCannotCheck || !strings.Contains(errOut.String(), "--ports") {
			t.Errorf("doctor --ports %q = %d with stderr %q, want %d and the flag named", ports, code, errOut.String(), exitCannotCheck)
		}
	}
}
