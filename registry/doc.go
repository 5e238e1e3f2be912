// Package registry is a thread-safe registry of cloud provider factories,
// looked up by provider name.
//
// It fills the same role as k8s.io/cloud-provider's RegisterCloudProvider
// and InitCloudProvider, but as a value: a Registry can be created, tested
// and thrown away, a second registration of a name is an error rather than
// the end of the process, names can be unregistered, and factories run
// outside the registry's lock, so a slow factory delays nobody else.
//
// Factories are upstream's [cloudprovider.Factory], so the same function can
// be registered here and upstream unchanged; [Registry.PublishToUpstream]
// copies registrations into upstream's process-global registry for use with
// the standard cloud-controller-manager command, without tripping its fatal
// duplicate check.
//
// A provider name becomes the scheme of every node's ProviderID
// ("NAME://…"), so it must be a lowercase letter followed by lowercase
// letters, digits and '-'; see [ValidateName].
//
// A provider built with package provider registers with
// provider.MustRegister(name, build) from an init function (or
// provider.Register on a Registry of your own), which writes the name
// once; a provider package's own factory registers with
// registry.MustRegister(name, factory) ([Registry.Register]). Build refuses
// a provider whose ProviderName is not the name it is registered under. The
// package-level functions ([Register], [MustRegister], [Names], [Build],
// [BuildFromFile]) act on a default Registry created with [New]; [Default]
// returns it, for the rest. Tests should create their own Registry with New.
//
// Errors can be told apart with errors.Is: [ErrInvalidName], [ErrNilFactory],
// [ErrDuplicate], [ErrUnknown], [ErrNilProvider] and [ErrNameMismatch].
package registry
