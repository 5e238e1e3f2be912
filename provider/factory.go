package provider

import (
	"io"

	cloudprovider "k8s.io/cloud-provider"
)

// Factory returns a cloudprovider.Factory, to register in a registry, that
// builds the Cloud named name from the Config build returns for the
// cloud-config (config is nil when there is no file). The Cloud comes back
// as a cloudprovider.Interface; on error, build's or New's, the Interface
// is nil (never a nil *Cloud in a non-nil Interface). build must not be
// nil.
func Factory(name string, build func(config io.Reader) (Config, error)) cloudprovider.Factory {
	return func(config io.Reader) (cloudprovider.Interface, error) {
		cfg, err := build(config)
		if err != nil {
			return nil, err
		}
		cloud, err := New(name, cfg)
		if err != nil {
			return nil, err
		}
		return cloud, nil
	}
}
