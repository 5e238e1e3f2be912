package main

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// troubleshootingQuotes returns the texts the README's Troubleshooting
// table quotes (the backquoted spans of its "Event or log line" column).
func troubleshootingQuotes(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Troubleshooting\n")
	if !ok {
		t.Fatal("README.md has no Troubleshooting section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var quotes []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "Symptom") || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range regexp.MustCompile("(router log )?`([^`]+)`").FindAllStringSubmatch(cells[2], -1) {
			if m[1] == "" { // a router's log line is miniupnpd's text, not ours
				quotes = append(quotes, m[2])
			}
		}
	}
	if len(quotes) < 10 {
		t.Fatalf("found %d quoted texts in the Troubleshooting table, want its rows' event and log lines", len(quotes))
	}
	return quotes
}

// placeholder is what the table writes for a value that varies: "..." for
// any text, and these words in capitals.
var placeholder = regexp.MustCompile(`\.\.\.|\b(NS|NAME|OTHER|PORT|IP|KEY|N|NODE|URL)\b`)

// quoteRegexp matches a message the quote q stands for.
func quoteRegexp(q string) *regexp.Regexp {
	var b strings.Builder
	last := 0
	for _, loc := range placeholder.FindAllStringIndex(q, -1) {
		b.WriteString(regexp.QuoteMeta(q[last:loc[0]]))
		if q[loc[0]:loc[1]] == "..." {
			b.WriteString(`.*`)
		} else {
			b.WriteString(`\S+`)
		}
		last = loc[1]
	}
	b.WriteString(regexp.QuoteMeta(q[last:]))
	return regexp.MustCompile(b.String())
}

// routerMessages returns the errors the load balancer returns (the text of
// the Service's SyncLoadBalancerFailed event) for Services a router refuses,
// through the real UPnP client and a fake router served over SOAP.
func routerMessages(t *testing.T) []string {
	t.Helper()
	node := netip.MustParseAddr("192.0.2.10")
	stranger := netip.MustParseAddr("192.0.2.99")
	r := fake.NewRouter(fake.RouterConfig{})
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		switch m.ExternalPort {
		case 80: // miniupnpd's permission rules
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeNotAuthorized, Description: "Action not authorized"}
		case 82: // miniupnpd in secure mode, to another host
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeConflict, Description: "ConflictInMappingEntry"}
		}
		return next(ctx, m)
	}})
	r.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 81, InternalClient: stranger, InternalPort: 81, Description: "game console", Enabled: true})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	client, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: v1.NodeStatus{
		Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: node.String()}},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
	}}}
	service := func(name string, edit func(*v1.Service), ports ...int32) *v1.Service {
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
		for _, p := range ports {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Protocol: v1.ProtocolTCP, Port: p, NodePort: 30000 + p})
		}
		if edit != nil {
			edit(svc)
		}
		return svc
	}
	var msgs []string
	for _, tc := range []struct {
		cfg   loadbalancer.Config
		svc   *v1.Service
		nodes []*v1.Node
	}{
		{svc: service("refused", nil, 80)},
		{svc: service("taken", nil, 81)},
		{svc: service("secure", nil, 82)},
		{svc: service("ranges", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"} }, 8080)},
		{svc: service("sctp", func(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolSCTP }, 8080)},
		{svc: service("v6", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol} }, 8080)},
		{svc: service("nonode", nil, 8080), nodes: []*v1.Node{}},
		{svc: service("ownnode", nil, 8080), cfg: loadbalancer.Config{SecureMode: true}},
	} {
		tc.cfg.Client = client
		lb, err := loadbalancer.New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tc.nodes == nil {
			tc.nodes = nodes
		}
		_, err = lb.EnsureLoadBalancer(t.Context(), "home-lab", tc.svc, tc.nodes)
		if err == nil {
			t.Fatalf("Ensure of %s succeeded, want the router's or the load balancer's refusal", tc.svc.Name)
		}
		// The service controller's event, with its prefix left out.
		msgs = append(msgs, "SyncLoadBalancerFailed ... "+err.Error())
	}
	// What a discovery that found no router returns (SSDP is not sent from
	// a test: it would leave the machine).
	nge := &igderr.NoGatewayError[igd.Candidate]{Searched: "SSDP search", Timeout: 2 * time.Second}
	msgs = append(msgs, "SyncLoadBalancerFailed ... loadbalancer: ensure service default/web: "+nge.Error())
	if _, err := edge.ParseConfig(strings.NewReader("loadBalancer:\n  secureMod: true\n")); err != nil {
		msgs = append(msgs, "Cloud provider could not be initialized: "+err.Error()) // main.go's initCloud
	}
	return msgs
}

// sourceLiterals returns the text of the non-test Go files of this module
// and of k8s.io/cloud-provider (whose controllers the CCM runs), where log
// lines and event messages are written.
func sourceLiterals(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/cloud-provider").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/cloud-provider: %v", err)
	}
	var b strings.Builder
	for _, root := range []string{"../..", strings.TrimSpace(string(out))} {
		walkGo(t, root, &b)
	}
	return b.String()
}

// walkGo writes the non-test Go files under root to b.
func walkGo(t *testing.T, root string, b *strings.Builder) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b.Write(data)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// Every text the Troubleshooting table quotes is one the code prints: the
// router's refusals as the load balancer reports them through the real UPnP
// client (their row names the UPnP error or the port in use), and every
// other quote's fixed parts as written in the code's messages.
func TestTroubleshootingQuotesWhatTheCodePrints(t *testing.T) {
	produced := routerMessages(t)
	source := sourceLiterals(t)
	for _, q := range troubleshootingQuotes(t) {
		re := quoteRegexp(q)
		matched := false
		for _, m := range produced {
			matched = matched || re.MatchString(m)
		}
		if matched {
			continue
		}
		// A router's answer is printed through igd's types, whose
		// sentinels' own texts ("igd: action not authorized (606)") are
		// never what a user reads: such quotes must be produced.
		if strings.Contains(q, "igd:") || strings.Contains(q, "UPnP") || strings.Contains(q, "port in use") || strings.Contains(q, "loadbalancer: service") {
			t.Errorf("quote %q matches none of the errors the load balancer returns for refused Services:\n%s", q, strings.Join(produced, "\n"))
			continue
		}
		// Messages are composed of parts joined by ": " (one format
		// string wrapping another's error): each part must be written.
		for _, part := range placeholder.Split(q, -1) {
			for _, p := range strings.Split(part, ": ") {
				if p = strings.Trim(p, " '"); len(p) >= 4 && !strings.Contains(source, p) {
					t.Errorf("quote %q: %q is in no message of the code", q, p)
				}
			}
		}
	}
}
