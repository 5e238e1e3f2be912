package cluster

import (
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
)

// ClientBuilder returns a cloudprovider.ControllerClientBuilder that hands
// out client for every name, as the cloud-controller-manager hands a cloud
// clients of the real API server. Its REST configs are empty: a cloud that
// builds its own clients from them reaches no server.
func ClientBuilder(client kubernetes.Interface) cloudprovider.ControllerClientBuilder {
	return clientBuilder{client}
}

type clientBuilder struct{ client kubernetes.Interface }

func (b clientBuilder) Config(string) (*restclient.Config, error)   { return &restclient.Config{}, nil }
func (b clientBuilder) ConfigOrDie(string) *restclient.Config       { return &restclient.Config{} }
func (b clientBuilder) Client(string) (kubernetes.Interface, error) { return b.client, nil }
func (b clientBuilder) ClientOrDie(string) kubernetes.Interface     { return b.client }
