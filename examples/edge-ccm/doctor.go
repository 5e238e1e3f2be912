package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// `edge-ccm doctor` checks the router this host finds against a cloud-config
// before edge-ccm is deployed: run it on a node's host network (the Job in
// manifests/doctor does) and read what the router allows and what to fix.

// doctorCommand is the first argument that selects the router check.
const doctorCommand = "doctor"

// The doctor's exit codes: 0 when edge-ccm will work with the cloud-config,
// exitProblem when the router or the config needs a change first,
// exitCannotCheck when no check could run (bad flags or config, no router).
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

// doctorNet says how the doctor reaches the router; the zero value is this
// host's network. Tests run it from inside a lab's namespace.
type doctorNet struct {
	// igd adapts the UPnP client's config; nil leaves it as it is.
	igd func(igd.Config) igd.Config
	// pcp, when set, is the PCP client; nil asks the router found on
	// pcp.Port.
	pcp *pcp.Client
}

// doctor is runDoctor with its outputs and network.
func doctor(ctx context.Context, args []string, stdout, stderr io.Writer, net doctorNet) int {
	fs := flag.NewFlagSet("edge-ccm "+doctorCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cloudConfig := fs.String("cloud-config", "", "edge cloud-config file the CCM will run with; \"\" = all defaults")
	otherHost := fs.String("other-host", "", "another LAN host's address, for the secure-mode probe (a mapping to a closed port, removed at once); \"\" = the router's own LAN address")
	output := fs.String("output", "table", "table, or json for scripts")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: edge-ccm %s [flags]\n\nChecks what the router allows, by probe mappings of its own (removed at once),\nagainst the cloud-config. The router is this host's default gateway, or the\none gateway.url names; the router finding says which and lists the LAN hosts\nthat answered and were not used. Exit status 0: edge-ccm will work;\n%d: fix the first failed finding; %d: the check could not run.\n\n", doctorCommand, exitProblem, exitCannotCheck)
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
	cfg, err := readCloudConfig(*cloudConfig)
	if err != nil {
		return fail(err)
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
	})
	if err != nil {
		return fail(err)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Check, strings.ToUpper(string(f.Status)), f.Detail)
	}
	_ = tw.Flush()
	for _, f := range rep.Findings {
		if f.Fix != "" && (f.Status == routercheck.Warn || f.Status == routercheck.Fail) {
			fmt.Fprintf(w, "\n%s (%s): %s\n", f.Check, f.Status, f.Fix)
		}
	}
	if p := rep.Problem(); p != nil {
		fmt.Fprintf(w, "\nedge-ccm will not work as configured. Fix first: %s: %s\n", p.Check, p.Fix)
		return
	}
	fmt.Fprintln(w, "\nedge-ccm will work with this cloud-config.")
}
