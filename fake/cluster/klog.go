package cluster

import (
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
// Errors still reach stderr (klog's stderrthreshold).
func quietKlog() {
	quietOnce.Do(func() {
		if !testing.Testing() || klog.V(1).Enabled() {
			return
		}
		klog.LogToStderr(false)
		klog.SetOutput(io.Discard)
	})
}
