package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readTar returns the regular files of a tarball by name, and the mode of
// each.
func readTar(t *testing.T, data []byte) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], modes[h.Name] = b, h.Mode
	}
}

// blobOf reads the blob a descriptor names and checks its digest and size.
func blobOf(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest {
		t.Fatalf("digest of %s: the blob's is %s, the descriptor says %s", d.MediaType, got, d.Digest)
	}
	if got := int64(len(b)); got != d.Size {
		t.Fatalf("size of %s: the blob has %d bytes, the descriptor says %d", d.MediaType, got, d.Size)
	}
	return b
}

// TestWrite reads an image back the way an OCI importer (containerd) and a
// Docker-archive loader do, and finds the binary as the entrypoint.
func TestWrite(t *testing.T) {
	bin := []byte("\x7fELF not really")
	var buf bytes.Buffer
	if err := Write(&buf, Config{Binary: bin, Path: "/edge-ccm", Arch: "arm64", Ref: "localhost/edge-ccm:dev"}); err != nil {
		t.Fatal(err)
	}
	files, modes := readTar(t, buf.Bytes())

	var layout any
	if err := json.Unmarshal(files["oci-layout"], &layout); err != nil {
		t.Errorf("oci-layout %q is not JSON: %v", files["oci-layout"], err)
	} else if diff := cmp.Diff(map[string]any{"imageLayoutVersion": "1.0.0"}, layout); diff != "" {
		t.Errorf("oci-layout (-want +got):\n%s", diff)
	}
	var index Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if n := len(index.Manifests); n != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", n)
	}
	md := index.Manifests[0]
	if got, want := md.Annotations["io.containerd.image.name"], "localhost/edge-ccm:dev"; got != want {
		t.Errorf("index.json's image name = %q, want %q", got, want)
	}
	if diff := cmp.Diff(&Platform{Architecture: "arm64", OS: "linux"}, md.Platform); diff != "" {
		t.Errorf("index.json's platform (-want +got):\n%s", diff)
	}
	var man Manifest
	if err := json.Unmarshal(blobOf(t, files, md), &man); err != nil {
		t.Fatal(err)
	}
	if n := len(man.Layers); n != 1 {
		t.Fatalf("the manifest lists %d layers, want 1", n)
	}
	var img Image
	if err := json.Unmarshal(blobOf(t, files, man.Config), &img); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/edge-ccm"}, img.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if got, want := img.Config.User, "65532:65532"; got != want {
		t.Errorf("user = %q, want %q", got, want)
	}
	if diff := cmp.Diff([]string{man.Layers[0].Digest}, img.RootFS.DiffIDs); diff != "" {
		t.Errorf("rootfs diff IDs (-want +got):\n%s", diff)
	}
	layer, layerModes := readTar(t, blobOf(t, files, man.Layers[0]))
	if got := layer["edge-ccm"]; !bytes.Equal(got, bin) {
		t.Errorf("the layer's edge-ccm = %q, want the binary %q", got, bin)
	}
	if got, want := layerModes["edge-ccm"], int64(0o755); got != want {
		t.Errorf("the layer's edge-ccm has mode %#o, want %#o", got, want)
	}

	var docker []DockerManifest
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil {
		t.Fatal(err)
	}
	if n := len(docker); n != 1 {
		t.Fatalf("manifest.json lists %d images, want 1", n)
	}
	if diff := cmp.Diff([]string{"localhost/edge-ccm:dev"}, docker[0].RepoTags); diff != "" {
		t.Errorf("manifest.json's repo tags (-want +got):\n%s", diff)
	}
	if _, ok := files[docker[0].Config]; !ok {
		t.Errorf("manifest.json's config %s is not in the tarball", docker[0].Config)
	}
	if got, want := blobOf(t, files, man.Layers[0]), files[docker[0].Layers[0]]; !bytes.Equal(got, want) {
		t.Errorf("manifest.json's layer %s differs from the OCI layer blob %s", docker[0].Layers[0], man.Layers[0].Digest)
	}
	if got, want := modes["index.json"], int64(0o644); got != want {
		t.Errorf("index.json has mode %#o, want %#o", got, want)
	}

	var again bytes.Buffer
	if err := Write(&again, Config{Binary: bin, Path: "/edge-ccm", Arch: "arm64", Ref: "localhost/edge-ccm:dev"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("the same inputs gave a different tarball (%d bytes, then %d), want the same", buf.Len(), again.Len())
	}
}

func TestWriteValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no binary", Config{Path: "/x", Ref: "x:1"}, "field Binary"},
		{"relative path", Config{Binary: []byte{1}, Path: "x", Ref: "x:1"}, "field Path"},
		{"no tag", Config{Binary: []byte{1}, Path: "/x", Ref: "localhost:5000/x"}, "field Ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(io.Discard, tc.cfg)
			if err == nil {
				t.Fatal("Write accepted it, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}
