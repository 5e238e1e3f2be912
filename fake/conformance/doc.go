// Package conformance checks a cloud provider's cloudprovider.LoadBalancer,
// cloudprovider.InstancesV2 and cloudprovider.Routes against the contract
// upstream's cloud controllers rely on, in a unit test.
//
// RunLoadBalancer, RunInstancesV2 and RunRoutes run every check as a
// subtest named after the promise it checks; a failure names that promise
// and what was seen, and a setup mistake is an error that is not a
// *BrokenPromise. A check with nothing to check in the setup given (no way
// to inspect the backend, no shut-down node) fails, saying which field
// would enable it, unless the setup's Skip names its promise (PromiseRetry,
// PromiseGone, ...): plain go test shows failures only, so a promise goes
// unchecked only where the author opts out of it by name. The checks are
// also values (LoadBalancerChecks,
// InstancesV2Checks, RoutesChecks)
// returning errors, so a suite can be run outside a *testing.T and its
// own tests can show each check failing on an implementation that breaks
// its promise.
//
// Every call the checks make is retried while it returns an *api.RetryError,
// after its RetryAfter (at most a second), as the service controller does.
// Run the suite with -race: the concurrency check only drives concurrent
// calls, and the race detector is what sees a data race.
package conformance
