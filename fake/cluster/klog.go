package cluster

import (
	"flag"
	"io"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

var quietOnce sync.Once

// quietKlog sends klog's process-wide output nowhere, once per process, in
// a test binary where klog's verbosity is 0: upstream's controllers log
// some lines through klog's global functions, not through the logger of
// their context, and a harness cannot give those to its Config.Logger.
// That includes their errors (utilruntime.HandleError's "Unhandled Error"
// lines, which a test that meets an error on purpose would print by the
// dozen): klog's stderrthreshold is raised to FATAL too. With -v above 0
// (klog.InitFlags in the test binary) everything stays on stderr.
func quietKlog() {
	quietOnce.Do(func() {
		if !testing.Testing() || klog.V(1).Enabled() {
			return
		}
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("alsologtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	})
}
