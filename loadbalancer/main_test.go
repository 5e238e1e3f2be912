package loadbalancer

import (
	"flag"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// TestMain keeps klog quiet unless -v is given to the test binary.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		klog.SetLogger(logr.Discard())
	}
	os.Exit(m.Run())
}
