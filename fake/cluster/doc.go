// Package cluster runs the real upstream cloud controllers
// (k8s.io/cloud-provider's service, cloud node, cloud node lifecycle and
// route controllers) against any cloudprovider.Interface on a client-go fake
// clientset, so a cloud provider can be tested in a unit test the way
// Kubernetes drives it.
//
// Start builds the clientset, initializes the cloud with a
// ControllerClientBuilder over it, starts the controllers the cloud
// supports and returns once they have synced the initial objects; Stop ends
// every goroutine they started. The WaitFor methods poll the clientset and,
// on timeout, return an error showing the object as last seen; Wait polls
// any condition, such as the state of the cloud. Node and Service build the
// objects kubelet and users create.
//
// What the fake cluster does not model:
//   - Finalizer-gated deletion: the fake clientset deletes at once. Use
//     Harness.DeleteService, which plays the API server's part.
//   - Admission, defaulting and validation: objects are stored as given,
//     except that one without a UID gets a new one, as the API server
//     gives.
//
// Harnesses share no state: tests may run them in parallel. The
// controllers log to Config.Logger, which discards by default; a node the
// cloud cannot initialize shows the cloud's last error in the wait's error.
package cluster
