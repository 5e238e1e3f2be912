// Command demo runs the whole edge story on this machine, with no cluster
// and no router: a fake UPnP router (an in-process IGD server that answers
// like miniupnpd), the real upstream cloud node controller and service
// controller on a client-go fake clientset (run by ccmkit's test kit,
// fake/cluster), and the edge provider built from a cloud-config through
// ccmkit's registry, exactly as the edge-ccm command builds it.
//
//	go run ./examples/demo
//
// It registers a node tainted as uninitialized and watches the cloud node
// controller initialize it, creates a Service of type LoadBalancer and shows
// the port mapping on the router and the Service's external IP, then deletes
// the Service and shows the mapping gone. It exits non-zero if any step
// fails or the whole run takes longer than -timeout; a step that fails after
// the Service was created first has the provider remove the Service's
// mapping, so that none is left on a real router.
//
// With -router-url it talks to a real router instead (its root-description
// URL, for example http://192.168.1.1:5000/rootDesc.xml): it then adds and
// removes one real port mapping, from -port on the router to this host, and
// assumes the router may be in secure mode.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(runMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// runMain runs the demo and returns the process's exit code: 0 when it
// finished or only printed its usage (-h), 1 when it failed.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(stderr, "demo failed: %v\n", err)
		return 1
	}
}

// usage is what -h prints before the flags.
const usage = `Usage: go run ./examples/demo [flags]

Runs the edge cloud provider of ccmkit the way edge-ccm does, on this machine,
with no cluster: the upstream cloud node and service controllers on a fake
clientset, and by default a fake UPnP router in this process. It shows
  - a node tainted as uninitialized being initialized (ProviderID edge://...),
  - a Service of type LoadBalancer getting a port mapping on the router and
    the router's external IP as its external IP,
  - the mapping removed when the Service is deleted.
It exits non-zero if a step fails or the run takes longer than -timeout.

With -router-url it uses a real router instead: it adds one real port
mapping, from -port on the router to this host, and removes it at the end.

Flags:
`

// options are the command-line flags.
type options struct {
	routerURL string
	port      int
	timeout   time.Duration
	verbose   bool
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.routerURL, "router-url", "", "root-description URL of a real router to use instead of the fake one (it gets one real port mapping, removed at the end)")
	fs.IntVar(&o.port, "port", 8080, "the Service's port, which becomes the external port on the router")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "bound on the whole run")
	fs.BoolVar(&o.verbose, "v", false, "show the controllers' logs")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.port < 1 || o.port > 65535 {
		return options{}, fmt.Errorf("-port %d is not a port", o.port)
	}
	if o.timeout <= 0 {
		return options{}, fmt.Errorf("-timeout %s must be positive", o.timeout)
	}
	return o, nil
}

// run parses args and runs the demo, printing its progress to out. For -h
// it prints the usage to out and returns flag.ErrHelp.
func run(ctx context.Context, args []string, out io.Writer) error {
	opts, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	start := time.Now()
	if err := demo(ctx, opts, out); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (the run is bounded by -timeout %s)", err, opts.timeout)
		}
		return err
	}
	fmt.Fprintf(out, "demo finished in %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}
