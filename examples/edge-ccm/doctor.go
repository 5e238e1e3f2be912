package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// `edge-ccm doctor` checks the router this host finds against a cloud-config
// before edge-ccm is deployed: run it on a node's host network (the Job in
// manifests/doctor does) and read what the router allows and what to fix.
// Each family is checked: IPv4 by routercheck, IPv6 (gateway.ipv6) in
// doctor6.go.

// doctorCommand is the first argument that selects the router check.
const doctorCommand = "doctor"

// The doctor's exit codes: 0 when edge-ccm will work with the cloud-config,
// exitProblem when the router or the config needs a change first,
// exitCannotCheck when no check could run (bad flags or config, no router
// with gateway.ipv6 off).
const (
	exitProblem     = 1
	exitCannotCheck = 2
)

// runDoctor runs the doctor with args (those after "doctor").
func runDoctor(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return doctor(ctx, args, os.Stdout, os.Stderr, doctorNet{})
}

// doctorNet says how the doctor reaches the router and the API server; the
// zero value is this host's network and the flags' API access. Tests run it
// from inside a lab's namespace.
type doctorNet struct {
	// igd adapts the UPnP client's config; nil leaves it as it is.
	igd func(igd.Config) igd.Config
	// pcp, when set, is the PCP client; nil asks the router found on
	// pcp.Port.
	pcp *pcp.Client
	// kube, when set, is the API client; nil builds one from --kubeconfig
	// or the pod's service account.
	kube kubernetes.Interface
	// ipv6Addrs, when set, returns this host's addresses on an interface
	// ("" = all); nil reads this host's.
	ipv6Addrs func(iface string) ([]netip.Addr, error)
	// pinhole adapts the UPnP pinhole client's config; nil leaves it.
	pinhole func(pinhole.Config) pinhole.Config
	// pcp6, when set, is the IPv6 PCP client; nil is gateway.ipv6's.
	pcp6 *pcp.Client
}

// doctor is runDoctor with its outputs and network.
func doctor(ctx context.Context, args []string, stdout, stderr io.Writer, net doctorNet) int {
	fs := flag.NewFlagSet("edge-ccm "+doctorCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cloudConfig := fs.String("cloud-config", "", "edge cloud-config file the CCM will run with; \"\" = all defaults")
	otherHost := fs.String("other-host", "", "another LAN host's address, for the secure-mode probe (a mapping to a closed port, removed at once); \"\" = the router's own LAN address")
	output := fs.String("output", "table", "table, or json for scripts")
	portsFlag := fs.String("ports", "", "external ports the Services will use, probed one by one: 80,443,53/udp (TCP unless /udp); \"\" = the ports of the LoadBalancer Services of --load-balancer-class or none, when the API server can be reached")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file, to read the Services' ports; \"\" = the pod's service account, if any")
	class := fs.String("load-balancer-class", DefaultClass, "the loadBalancerClass served: Services of it, and those without a class, are read for their ports")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: edge-ccm %s [flags]\n\nChecks what the router allows, by probe mappings of its own (removed at once),\nagainst the cloud-config, and each port the Services will use. The router is\nthis host's default gateway, or the one gateway.url names; the router finding\nsays which and lists the LAN hosts that answered and were not used. With\ngateway.ipv6 enabled it checks IPv6 too: this host's global address, the\nrouter's IPv6 firewall, and a test pinhole to this host (opened and closed),\nwhether or not an IPv4 router answers. Exit status 0: edge-ccm will work; %d:\nfix the first failed finding; %d: the check could not run.\n\n", doctorCommand, exitProblem, exitCannotCheck)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitCannotCheck
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "edge-ccm %s: %v\n", doctorCommand, err)
		return exitCannotCheck
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *output != "table" && *output != "json" {
		return fail(fmt.Errorf("--output %q: want table or json", *output))
	}
	var other netip.Addr
	if *otherHost != "" {
		a, err := netip.ParseAddr(*otherHost)
		if err != nil || !a.Is4() {
			return fail(fmt.Errorf("--other-host %q: want an IPv4 address", *otherHost))
		}
		other = a
	}
	ports, err := parsePorts(*portsFlag)
	if err != nil {
		return fail(err)
	}
	cfg, err := readCloudConfig(*cloudConfig)
	if err != nil {
		return fail(err)
	}
	var wantedBy map[igd.Key][]string
	if *portsFlag == "" {
		kube := net.kube
		if kube == nil {
			if kube, err = kubeClient(*kubeconfig); err != nil {
				return fail(err)
			}
		}
		if kube == nil {
			fmt.Fprintf(stderr, "edge-ccm %s: no API access (no --kubeconfig, no service account token): the Services' ports are not probed; name them with --ports\n", doctorCommand)
		} else if wantedBy, err = servicePorts(ctx, kube, *class); err != nil {
			return fail(err)
		}
		ports = slices.SortedFunc(maps.Keys(wantedBy), compareKeys)
	}
	igdCfg := cfg.Gateway.ClientConfig()
	if net.igd != nil {
		igdCfg = net.igd(igdCfg)
	}
	client, err := igd.NewClient(igdCfg)
	if err != nil {
		return fail(err)
	}
	lb := cfg.LoadBalancer
	rep, err := routercheck.Run(ctx, client, routercheck.Options{
		SecureMode: lb.SecureMode, PermanentLease: lb.PermanentLease, AllowNonPublicExternalIP: lb.AllowNonPublicExternalIP,
		OtherHost: other, PCP: net.pcp, RequirePCP: cfg.Gateway.Protocol == edge.ProtocolPCP || cfg.Gateway.Protocol == edge.ProtocolPCPOnly,
		ServicePorts: ports,
	})
	if err != nil {
		if !cfg.Gateway.IPv6.Enabled {
			return fail(err)
		}
		// No IPv4 router answered; its IPv6 firewall may (behind a
		// carrier's NAT, the router's control URL can be reachable over
		// IPv6 only): the IPv6 checks still run.
		rep = routercheck.Report{Findings: []routercheck.Finding{{Check: routercheck.CheckRouter, Status: routercheck.Fail,
			Detail: err.Error() + "; the IPv4 checks did not run",
			Fix:    "name the router with gateway.url (its description on its IPv4 LAN address), or turn UPnP IGD on in it"}}}
	}
	v6 := ipv6Findings(ctx, cfg.Gateway, net)
	rep.Findings = append(rep.Findings, v6...)
	if cfg.Gateway.IPv6.Enabled && !slices.ContainsFunc(v6, func(f routercheck.Finding) bool { return f.Status != routercheck.OK }) {
		servedOnIPv6(rep.Findings)
	}
	for i, f := range rep.Findings {
		if f.Port != nil && len(wantedBy[*f.Port]) > 0 {
			rep.Findings[i].Detail += " (wanted by " + strings.Join(wantedBy[*f.Port], ", ") + ")"
		}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(err)
		}
	} else {
		printReport(stdout, rep)
	}
	if rep.Problem() != nil {
		return exitProblem
	}
	return 0
}

// servedOnIPv6 turns a failed router or external-ip finding into a warning
// when IPv6 works: with no usable IPv4 router, or behind a carrier's NAT,
// Services that have IPv6 are served on it (their IPv4 family gets an
// IPFamilyNotServed event); IPv4-only ones are not served.
func servedOnIPv6(fs []routercheck.Finding) {
	for i, f := range fs {
		if (f.Check == routercheck.CheckRouter || f.Check == routercheck.CheckExternalIP) && f.Status == routercheck.Fail {
			fs[i].Status = routercheck.Warn
			fs[i].Fix = "Services with IPv6 in spec.ipFamilies are served on IPv6 only (their IPv4 family gets an IPFamilyNotServed event); IPv4-only Services are not served: make them dual-stack, or " + f.Fix
		}
	}
}

// parsePorts parses --ports: comma-separated ports, each TCP unless it ends
// in /udp (or /tcp).
func parsePorts(s string) ([]igd.Key, error) {
	if s == "" {
		return nil, nil
	}
	var keys []igd.Key
	for _, p := range strings.Split(s, ",") {
		num, proto, _ := strings.Cut(p, "/")
		k := igd.Key{Protocol: igd.TCP}
		switch strings.ToLower(proto) {
		case "", "tcp":
		case "udp":
			k.Protocol = igd.UDP
		default:
			return nil, fmt.Errorf("--ports %q: %q: the protocol must be tcp or udp", s, p)
		}
		n, err := strconv.ParseUint(num, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("--ports %q: %q: want a port of 1-65535, optionally /tcp or /udp", s, p)
		}
		k.ExternalPort = uint16(n)
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// kubeClient returns a client for kubeconfig, or for the pod's service
// account when kubeconfig is "" (nil when there is none: not in a pod, or
// its token is not mounted).
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, nil
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", kubeconfig, err)
	}
	return kubernetes.NewForConfig(rest.AddUserAgent(cfg, "edge-ccm-doctor"))
}

// listTimeout bounds the doctor's one API call: an API server that does not
// answer in that time is not one to wait for at a terminal.
const listTimeout = 30 * time.Second

// servicePorts returns the external ports of the Services of type
// LoadBalancer whose class is class or unset, with the Services
// ("namespace/name") that want each. SCTP ports are left out: routers map
// only TCP and UDP.
func servicePorts(ctx context.Context, kube kubernetes.Interface, class string) (map[igd.Key][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	list, err := kube.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the Services for their ports (or name them with --ports): %w", err)
	}
	out := map[igd.Key][]string{}
	for _, svc := range list.Items {
		if svc.Spec.Type != v1.ServiceTypeLoadBalancer || (svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != class) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			k := igd.Key{Protocol: igd.TCP, ExternalPort: uint16(p.Port)}
			switch p.Protocol {
			case v1.ProtocolUDP:
				k.Protocol = igd.UDP
			case v1.ProtocolTCP, "":
			default:
				continue
			}
			if name := svc.Namespace + "/" + svc.Name; !slices.Contains(out[k], name) {
				out[k] = append(out[k], name)
			}
		}
	}
	return out, nil
}

// compareKeys orders keys by protocol, then port.
func compareKeys(a, b igd.Key) int {
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	return int(a.ExternalPort) - int(b.ExternalPort)
}

// readCloudConfig parses the cloud-config at path ("" = defaults).
func readCloudConfig(path string) (edge.Config, error) {
	if path == "" {
		return edge.Default(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return edge.Config{}, fmt.Errorf("--cloud-config: %w", err)
	}
	defer f.Close()
	cfg, err := edge.ParseConfig(f)
	if err != nil {
		return edge.Config{}, fmt.Errorf("--cloud-config %s: %w", path, err)
	}
	return cfg, nil
}

// printReport writes rep as a table of findings, the fixes of those that
// need one, and a verdict.
func printReport(w io.Writer, rep routercheck.Report) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, f := range rep.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", findingName(f), strings.ToUpper(string(f.Status)), f.Detail)
	}
	_ = tw.Flush()
	for _, f := range rep.Findings {
		if f.Fix != "" && (f.Status == routercheck.Warn || f.Status == routercheck.Fail) {
			fmt.Fprintf(w, "\n%s (%s): %s\n", findingName(f), f.Status, f.Fix)
		}
	}
	if p := rep.Problem(); p != nil {
		fmt.Fprintf(w, "\nedge-ccm will not work as configured. Fix first: %s: %s\n", findingName(*p), p.Fix)
		return
	}
	fmt.Fprintln(w, "\nedge-ccm will work with this cloud-config.")
}

// findingName is f's check, with the port of a per-port finding ("port TCP/80").
func findingName(f routercheck.Finding) string {
	if f.Port != nil {
		return f.Check + " " + f.Port.String()
	}
	return f.Check
}
