package conformance_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake/conformance"
)

// minimalLB and minimalInstances are the smallest setups: the
// implementation and, for InstancesV2, its nodes; nothing else.
func minimalLB() conformance.LoadBalancerSetup {
	return conformance.LoadBalancerSetup{LoadBalancer: newMemLB("")}
}

func minimalInstances() conformance.InstancesV2Setup {
	return conformance.InstancesV2Setup{Instances: memInstancesSetup("").Instances, Existing: []*v1.Node{memNode("alive")}}
}

// The promises the minimal setups cannot check, and the option that would
// let each be checked.
var (
	uncheckedLB = map[string]string{
		elsewhere:    "LoadBalancerSetup.Elsewhere",
		retryPromise: "LoadBalancerSetup.ProvokeRetry",
		portChange:   "LoadBalancerSetup.Forwards",
		nodeChange:   "LoadBalancerSetup.Forwards",
		nothingLeft:  "LoadBalancerSetup.Leftovers",
	}
	uncheckedInstances = map[string]string{
		instGone:     "InstancesV2Setup.Gone",
		instShutdown: "InstancesV2Setup.Shutdown",
		instZone:     "InstancesV2Setup.Zones",
	}
)

// A check that cannot check its promise on the setup given is an error
// naming the option that enables it, not a skip that plain go test hides.
func TestUncheckedPromiseFailsNamingItsOption(t *testing.T) {
	for _, c := range conformance.LoadBalancerChecks() {
		if option, ok := uncheckedLB[c.Promise]; ok {
			wantUnchecked(t, c.Promise, option, c.Run(t.Context(), minimalLB()))
		}
	}
	for _, c := range conformance.InstancesV2Checks() {
		if option, ok := uncheckedInstances[c.Promise]; ok {
			wantUnchecked(t, c.Promise, option, c.Run(t.Context(), minimalInstances()))
		}
	}
}

func wantUnchecked(t *testing.T, promise, option string, err error) {
	t.Helper()
	var bp *conformance.BrokenPromise
	switch {
	case err == nil, errors.Is(err, conformance.ErrSkipped):
		t.Errorf("%s: got %v, want an error saying it is unchecked", promise, err)
	case errors.As(err, &bp):
		t.Errorf("%s: got broken promise %v, want a setup error", promise, err)
	case !strings.Contains(err.Error(), promise) || !strings.Contains(err.Error(), option) || !strings.Contains(err.Error(), "Skip"):
		t.Errorf("%s: error %q does not name the promise, the option %s and Skip", promise, err, option)
	}
}

// envMinimal makes TestMinimalSetups run; TestPlainGoTestNamesUncheckedPromises
// sets it in the test binary it starts.
const envMinimal = "CONFORMANCE_RUN_MINIMAL"

// TestMinimalSetups runs both suites on the minimal setups; it runs only
// when started by TestPlainGoTestNamesUncheckedPromises.
func TestMinimalSetups(t *testing.T) {
	if os.Getenv(envMinimal) == "" {
		t.Skip("run by TestPlainGoTestNamesUncheckedPromises")
	}
	conformance.RunLoadBalancer(t, func(testing.TB) conformance.LoadBalancerSetup { return minimalLB() })
	conformance.RunInstancesV2(t, func(testing.TB) conformance.InstancesV2Setup { return minimalInstances() })
}

// What go test prints without -v on the minimal setups: a failure, naming
// every promise left unchecked and the option that would check it.
func TestPlainGoTestNamesUncheckedPromises(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMinimalSetups$", "-test.count=1")
	cmd.Env = append(os.Environ(), envMinimal+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("go test passed on setups that leave promises unchecked; output:\n%s", out)
	}
	for _, unchecked := range []map[string]string{uncheckedLB, uncheckedInstances} {
		for promise, option := range unchecked {
			if !strings.Contains(string(out), promise) || !strings.Contains(string(out), option) {
				t.Errorf("the output does not name unchecked promise %q and option %s", promise, option)
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
