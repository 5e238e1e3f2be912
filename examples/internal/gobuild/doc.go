// Package gobuild builds Go commands from tests, the way the running test
// binary was built: with its -race, -tags, -trimpath, -gcflags and the
// like, and its CGO_ENABLED, GOOS, GOARCH and GOEXPERIMENT, read from the
// test binary's build information. A command built so compiles nothing the
// test build has not already compiled (the build cache holds it) and only
// links, where a build with other flags (a static CGO_ENABLED=0 -trimpath
// build, say) would compile its whole dependency tree again. The release
// builds (static, version-stamped, cross-compiled) are the Makefile's
// `build` and `cross`, not the tests'.
//
// A build is bounded by the test binary's own deadline (go test -timeout),
// never by a wall clock of its own: on a busy machine it takes as long as
// it takes, and the test fails with a message naming the build and how
// long it ran, shortly before the test binary would panic. Import it from
// _test.go files only.
package gobuild
