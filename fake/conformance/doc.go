// Package conformance checks a cloud provider's cloudprovider.LoadBalancer
// and cloudprovider.InstancesV2 against the contract upstream's cloud
// controllers rely on, in a unit test.
//
// RunLoadBalancer and RunInstancesV2 run every check as a subtest named
// after the promise it checks; a failure names that promise and what was
// seen. The checks are also values (LoadBalancerChecks, InstancesV2Checks)
// returning errors, so a suite can be run outside a *testing.T and its
// own tests can show each check failing on an implementation that breaks
// its promise.
//
// Every call the checks make is retried while it returns an *api.RetryError,
// after its RetryAfter (at most a second), as the service controller does.
// Run the suite with -race: the concurrency check only drives concurrent
// calls, and the race detector is what sees a data race.
package conformance
