// Package gobuild builds Go commands from tests. A build is bounded by the
// test binary's own deadline (go test -timeout), never by a wall clock of
// its own: a cold build of a large dependency tree on a busy machine takes
// as long as it takes, and the test fails with a message naming the build
// and how long it ran, shortly before the test binary would panic. Import it
// from _test.go files only.
package gobuild
