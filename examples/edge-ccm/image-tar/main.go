// Command image-tar packs a static edge-ccm binary into an image tarball
// that `k3s ctr images import`, `ctr -n k8s.io images import` and
// `docker load` read, with no Docker engine and no base image:
//
//	make image-tar   # bin/edge-ccm-linux-ARCH.tar for each image platform
//	go run ./examples/edge-ccm/image-tar -binary bin/edge-ccm-linux-arm64 -arch arm64 \
//	  -ref localhost/edge-ccm:dev -o bin/edge-ccm-linux-arm64.tar
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ccmkit/ccmkit/examples/internal/ociimage"
)

func main() {
	binary := flag.String("binary", "", "the static binary to pack (make cross builds them)")
	arch := flag.String("arch", "amd64", "its GOARCH")
	ref := flag.String("ref", "localhost/edge-ccm:dev", "the image's name once loaded (name:tag)")
	out := flag.String("o", "", "the tarball to write")
	flag.Parse()
	if err := run(*binary, *arch, *ref, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image-tar:", err)
		os.Exit(1)
	}
}

func run(binary, arch, ref, out string) error {
	if binary == "" || out == "" {
		return fmt.Errorf("-binary and -o are required")
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := ociimage.Write(f, ociimage.Config{Binary: bin, Path: "/edge-ccm", Arch: arch, Ref: ref}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
